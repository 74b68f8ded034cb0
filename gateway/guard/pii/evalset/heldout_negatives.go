package evalset

import (
	"fmt"
	"strconv"
	"strings"
)

// negative fills a placeholder that is no detector type: look-alikes of cards and phone numbers
// (ISBNs, IMEIs, EAN-13 barcodes, Canadian SINs and ABA routing numbers with their own check
// digits, Luhn-valid numbers without a card prefix or inside identifiers, timestamps, versions,
// order and invoice numbers, tracking numbers, dates, times, amounts) and plain fillers.
func (g *heldOutGen) negative(name string) string {
	r := g.r
	switch name {
	case "isbn":
		if r.IntN(2) == 0 {
			body := g.pick("978", "979") + g.digits(9)
			d := body + strconv.Itoa(eanDigit(body))
			return g.pick(d, d[:3]+"-"+d[3:4]+"-"+d[4:8]+"-"+d[8:12]+"-"+d[12:])
		}
		body := g.digits(9)
		sum := 0
		for i := 0; i < 9; i++ {
			sum += (10 - i) * int(body[i]-'0')
		}
		c := (11 - sum%11) % 11
		check := strconv.Itoa(c)
		if c == 10 {
			check = "X"
		}
		return body[:1] + "-" + body[1:4] + "-" + body[4:9] + "-" + check
	case "imei":
		body := g.pick("35", "86", "01", "99") + g.digits(12)
		return body + strconv.Itoa(luhnDigit(body))
	case "ean":
		body := g.pick("400", "412", "440", "50", "30", "37", "45", "49", "69", "80", "84", "87", "93", "789", "750", "890", "00", "06")
		body += g.digits(12 - len(body))
		return body + strconv.Itoa(eanDigit(body))
	case "sin":
		body := strconv.Itoa(g.between(1, 7)) + g.digits(7)
		d := body + strconv.Itoa(luhnDigit(body))
		return g.pick(d, d[:3]+" "+d[3:6]+" "+d[6:], d[:3]+"-"+d[3:6]+"-"+d[6:])
	case "routing":
		body := fmt.Sprintf("%02d", g.between(1, 32)) + g.digits(6)
		w := []int{3, 7, 1, 3, 7, 1, 3, 7}
		sum := 0
		for i := range body {
			sum += w[i] * int(body[i]-'0')
		}
		return body + strconv.Itoa((10-sum%10)%10)
	case "luhn_other":
		return g.luhnOther()
	case "account":
		return g.pick(g.digits(10), g.digits(2)+"-"+g.digits(4)+"-"+g.digits(7)+"-"+g.digits(2), g.digits(8)+"/"+g.digits(4))
	case "order_no":
		return g.pick(g.digits(g.between(8, 12)), g.digits(3)+"-"+g.digits(7)+"-"+g.digits(7), "ORD-"+g.digits(8), "#"+g.digits(6))
	case "invoice":
		return g.pick("INV-2024-"+g.digits(6), "2024/"+g.digits(6), "RE"+g.digits(8), g.digits(4)+"-"+g.digits(6))
	case "txn":
		return g.pick("txn_"+fmt.Sprintf("%012x", r.Uint64()&0xffffffffffff), "TXN-2024"+fmt.Sprintf("%02d%02d", g.between(1, 12), g.between(1, 28))+"-"+g.digits(6))
	case "tracking":
		return g.pick("1Z"+strings.ToUpper(fmt.Sprintf("%06x", r.IntN(1<<24)))+g.digits(10),
			group("9400"+g.digits(18), []int{4, 4, 4, 4, 4, 2}, " "), g.digits(12), "JD"+g.digits(18))
	case "unix_ts":
		return strconv.Itoa(g.between(1_500_000_000, 1_800_000_000))
	case "unix_ms":
		return strconv.Itoa(g.between(1_500_000_000, 1_800_000_000)) + g.digits(3)
	case "unix_ns":
		return strconv.Itoa(g.between(1_500_000_000, 1_800_000_000)) + g.digits(9)
	case "iso_ts":
		return fmt.Sprintf("20%02d-%02d-%02dT%02d:%02d:%02d%s", g.between(15, 26), g.between(1, 12), g.between(1, 28),
			r.IntN(24), r.IntN(60), r.IntN(60), g.pick("Z", "+01:00", ".123Z", "-05:00"))
	case "compact_ts":
		return fmt.Sprintf("20%02d%02d%02d%02d%02d%02d", g.between(15, 26), g.between(1, 12), g.between(1, 28), r.IntN(24), r.IntN(60), r.IntN(60))
	case "date":
		y, m, d := g.between(2015, 2026), g.between(1, 12), g.between(1, 28)
		return g.pick(fmt.Sprintf("%02d/%02d/%d", m, d, y), fmt.Sprintf("%d-%02d-%02d", y, m, d), fmt.Sprintf("%02d.%02d.%d", d, m, y), fmt.Sprintf("%d %s %d", d, g.pick("Jan", "Mar", "Jul", "Nov"), y))
	case "expiry":
		return fmt.Sprintf("%02d/%02d", g.between(1, 12), g.between(25, 32))
	case "time":
		return fmt.Sprintf("%02d:%02d", r.IntN(24), r.IntN(60))
	case "time_range":
		return fmt.Sprintf("%02d:%02d-%02d:%02d", g.between(7, 12), 15*r.IntN(4), g.between(13, 19), 15*r.IntN(4))
	case "duration":
		return g.pick(fmt.Sprintf("%dh%02dm", g.between(1, 9), r.IntN(60)), fmt.Sprintf("%d ms", g.between(10, 9999)))
	case "version":
		return g.pick(fmt.Sprintf("v%d.%d.%d", r.IntN(3), r.IntN(40), r.IntN(20)), fmt.Sprintf("%d.%d.%d-rc.%d", r.IntN(10), r.IntN(30), r.IntN(10), g.between(1, 5)))
	case "build":
		return g.pick(fmt.Sprintf("10.0.%d.%d", g.between(10000, 26000), g.between(100, 5000)), fmt.Sprintf("%d.%d.%d.%d", g.between(100, 130), r.IntN(10), g.between(1000, 6999), r.IntN(300)))
	case "sha":
		return fmt.Sprintf("%07x", r.IntN(1<<28))
	case "uuid":
		return fmt.Sprintf("%08x-%04x-4%03x-8%03x-%012x", r.Uint32(), r.IntN(1<<16), r.IntN(1<<12), r.IntN(1<<12), r.Uint64()&0xffffffffffff)
	case "price":
		return g.pick(fmt.Sprintf("%d.%02d", r.IntN(5000), r.IntN(100)), fmt.Sprintf("%d,%03d.%02d", g.between(1, 99), r.IntN(1000), r.IntN(100)))
	case "big":
		return fmt.Sprintf("%d,%03d,%03d", g.between(1, 999), r.IntN(1000), r.IntN(1000))
	case "count":
		return strconv.Itoa(g.between(2, 4000))
	case "room":
		return g.pick(fmt.Sprintf("%d.%02d", g.between(1, 9), r.IntN(40)), fmt.Sprintf("B-%d", g.between(100, 450)))
	case "pin":
		return g.digits(g.between(4, 8))
	case "page_range":
		a := g.between(1, 1500)
		return fmt.Sprintf("%d-%d", a, a+g.between(3, 90))
	case "coords":
		return fmt.Sprintf("%d.%04d, -%d.%04d", g.between(10, 60), r.IntN(10000), g.between(1, 130), r.IntN(10000))
	case "serial":
		return g.pick("SN-"+g.digits(4)+"-"+g.digits(5)+"-A", "C02"+strings.ToUpper(fmt.Sprintf("%09x", r.Uint64()&0xfffffffff)), g.digits(4)+" "+g.digits(4)+" "+g.digits(4))
	case "zip":
		return g.digits(5)
	case "zip_plus_four":
		return g.digits(5) + "-" + g.digits(4)
	case "year":
		return strconv.Itoa(g.between(1990, 2026))
	case "network":
		return g.pick("Visa card", "Mastercard", "debit card", "card")
	case "handle":
		return strings.ToLower(g.pick(firstNames...)) + g.digits(2)
	case "street":
		return g.pick(streets...) + " Street"
	case "house":
		return strconv.Itoa(g.between(1, 250))
	case "city":
		return g.pick(cities...)
	case "name":
		return g.pick(firstNames...) + " " + g.pick(lastNames...)
	}
	return g.pick(firstNames...)
}

// luhnOther draws a Luhn-valid 12-19 digit number that is no card: a prefix no network issues
// (0, 7, 8 outside 81/82/8600, 9 outside 9704/9792/9860), or a card number inside an identifier.
func (g *heldOutGen) luhnOther() string {
	if g.r.IntN(3) == 0 {
		num, _ := g.card()
		num = strings.NewReplacer(" ", "", "-", "").Replace(num)
		return g.pick("REF"+num, num+"-"+g.digits(2), g.digits(3)+"-"+num, num+"."+g.digits(3), "id_"+num)
	}
	var prefix string
	for {
		prefix = g.pick("0", "7", "8", "9") + g.digits(3)
		if !(prefix[:2] == "81" || prefix[:2] == "82" || prefix == "8600" || prefix == "9704" || prefix == "9792" || prefix == "9860") {
			break
		}
	}
	body := prefix + g.digits(g.between(12, 19)-len(prefix)-1)
	return body + strconv.Itoa(luhnDigit(body))
}

// eanDigit is the GS1 check digit (weights 1 and 3 from the left for 12 digits).
func eanDigit(body string) int {
	sum := 0
	for i := range body {
		w := 1
		if i%2 == 1 {
			w = 3
		}
		sum += w * int(body[i]-'0')
	}
	return (10 - sum%10) % 10
}
