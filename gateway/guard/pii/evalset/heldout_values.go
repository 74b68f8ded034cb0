package evalset

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/nyaruka/phonenumbers"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

// heldValue is a filled placeholder: prefix (unlabelled, e.g. "tel:") then text, labelled as
// entity (none when "") with kind.
type heldValue struct {
	prefix, text string
	entity       pii.Entity
	kind         string
}

// heldOutGen draws the held-out set's values.
type heldOutGen struct {
	r       *rand.Rand
	regions []string // every region libphonenumber knows, sorted
}

func newHeldOutGen(r *rand.Rand) *heldOutGen {
	g := &heldOutGen{r: r}
	for code := range phonenumbers.GetSupportedRegions() {
		g.regions = append(g.regions, code)
	}
	sort.Strings(g.regions)
	return g
}

func (g *heldOutGen) digits(n int) string { return digits(g.r, n) }
func (g *heldOutGen) pick(xs ...string) string {
	return xs[g.r.IntN(len(xs))]
}
func (g *heldOutGen) between(lo, hi int) int { return lo + g.r.IntN(hi-lo+1) }

// value fills one held-out placeholder.
func (g *heldOutGen) value(name string) heldValue {
	switch name {
	case "card":
		text, kind := g.card()
		return heldValue{text: text, entity: pii.CreditCard, kind: kind}
	case "phone":
		return g.phone()
	case "email":
		return heldValue{text: strings.ToLower(g.pick(firstNames...)) + "." + g.digits(2) + "@" + g.pick("example.org", "mail.example.com", "example.jp"), entity: pii.Email}
	case "ip":
		return heldValue{text: fmt.Sprintf("%d.%d.%d.%d", g.between(11, 223), g.r.IntN(256), g.r.IntN(256), g.between(1, 254)), entity: pii.IPAddress}
	}
	return heldValue{text: g.negative(name)}
}

// cardNet is a card network's IIN range and the lengths it issues, as the networks publish them.
type cardNet struct {
	kind    string
	lo, hi  string
	lengths []int
}

var heldOutCardNets = []cardNet{
	{"visa", "4", "4", []int{13, 16, 19}},
	{"visa-electron", "4026", "4026", []int{16}}, {"visa-electron", "417500", "417500", []int{16}},
	{"visa-electron", "4508", "4508", []int{16}}, {"visa-electron", "4913", "4917", []int{16}},
	{"mastercard", "51", "55", []int{16}}, {"mastercard-2series", "2221", "2720", []int{16}},
	{"amex", "34", "34", []int{15}}, {"amex", "37", "37", []int{15}},
	{"discover", "6011", "6011", []int{16, 17, 18, 19}}, {"discover", "644", "649", []int{16, 19}},
	{"discover", "65", "65", []int{16, 19}}, {"discover-unionpay", "622126", "622925", []int{16, 19}},
	{"jcb", "3528", "3589", []int{16, 17, 18, 19}}, {"jcb-legacy", "1800", "1800", []int{15}},
	{"jcb-legacy", "2131", "2131", []int{15}},
	{"diners", "36", "36", []int{14}}, {"diners", "300", "305", []int{14, 16}},
	{"diners", "3095", "3095", []int{14, 16}}, {"diners", "38", "39", []int{14, 16}},
	{"maestro", "50", "50", []int{12, 13, 15, 16, 19}}, {"maestro", "56", "58", []int{12, 14, 16, 18, 19}},
	{"maestro", "6304", "6304", []int{12, 16, 18, 19}}, {"maestro", "6759", "6759", []int{12, 16, 19}},
	{"maestro", "6761", "6763", []int{12, 13, 16, 19}}, {"maestro", "5893", "5893", []int{12, 16, 19}},
	{"unionpay", "62", "62", []int{16, 17, 18, 19}}, {"unionpay", "81", "81", []int{16, 19}},
	{"mir", "2200", "2204", []int{16, 17, 18, 19}},
	{"rupay", "60", "60", []int{16}}, {"rupay", "508", "508", []int{16}}, {"rupay", "82", "82", []int{16}},
	{"verve", "506099", "506198", []int{16, 18, 19}}, {"verve", "507865", "507964", []int{16, 19}},
	{"verve", "650002", "650027", []int{16, 18}},
	{"troy", "9792", "9792", []int{16}}, {"humo", "9860", "9860", []int{16}}, {"uzcard", "8600", "8600", []int{16}},
	{"borica", "2205", "2205", []int{16}}, {"dankort", "5019", "5019", []int{16}},
	{"interpayment", "636", "636", []int{16, 19}}, {"instapayment", "637", "639", []int{16}},
	{"napas", "9704", "9704", []int{16, 19}}, {"uatp", "1", "1", []int{15}},
}

// card draws a Luhn-valid number of a random network and length, compact or in one of the
// printed groupings of its length, with spaces or dashes.
func (g *heldOutGen) card() (string, string) {
	net := heldOutCardNets[g.r.IntN(len(heldOutCardNets))]
	n := net.lengths[g.r.IntN(len(net.lengths))]
	lo, _ := strconv.Atoi(net.lo)
	hi, _ := strconv.Atoi(net.hi)
	prefix := fmt.Sprintf("%0*d", len(net.lo), g.between(lo, hi))
	body := prefix + g.digits(n-len(prefix)-1)
	num := body + strconv.Itoa(luhnDigit(body))
	kind := fmt.Sprintf("%s-%d", net.kind, n)
	if g.r.IntN(3) == 0 {
		return num, kind
	}
	var sizes []int
	switch {
	case n == 15 && (net.kind == "amex" || g.r.IntN(2) == 0), n == 14 && g.r.IntN(2) == 0:
		sizes = []int{4, 6, n - 10}
	case n == 13 && g.r.IntN(2) == 0:
		sizes = []int{4, 4, 5}
	default:
		for left := n; left > 0; left -= 4 {
			sizes = append(sizes, min(4, left))
		}
	}
	return group(num, sizes, g.pick(" ", "-")), kind
}

var phoneTypes = []phonenumbers.PhoneNumberType{phonenumbers.FIXED_LINE, phonenumbers.MOBILE,
	phonenumbers.TOLL_FREE, phonenumbers.VOIP, phonenumbers.PERSONAL_NUMBER, phonenumbers.UAN,
	phonenumbers.PREMIUM_RATE, phonenumbers.SHARED_COST, phonenumbers.PAGER}

// phoneNumber draws a valid number of region: an example number of a random type with up to four
// trailing digits changed while it stays valid.
func (g *heldOutGen) phoneNumber(region string) *phonenumbers.PhoneNumber {
	var ex *phonenumbers.PhoneNumber
	for _, i := range g.r.Perm(len(phoneTypes)) {
		if ex = phonenumbers.GetExampleNumberForType(region, phoneTypes[i]); ex != nil {
			break
		}
	}
	if ex == nil {
		return nil
	}
	nsn := phonenumbers.GetNationalSignificantNumber(ex)
	cc := strconv.Itoa(int(ex.GetCountryCode()))
	for try := 0; try < 20; try++ {
		k := min(4, len(nsn)-3)
		cand := nsn[:len(nsn)-k] + g.digits(k)
		if n, err := phonenumbers.Parse("+"+cc+cand, "ZZ"); err == nil && phonenumbers.IsValidNumber(n) {
			return n
		}
	}
	return ex
}

// phone draws a number written internationally (any region) or nationally (the detector's default
// regions, whose national formats it is configured for) in one of several printed variants.
func (g *heldOutGen) phone() heldValue {
	national := g.r.IntN(2) == 0
	var region string
	if national {
		region = pii.DefaultPhoneRegions[g.r.IntN(len(pii.DefaultPhoneRegions))]
	} else {
		region = g.regions[g.r.IntN(len(g.regions))]
	}
	num := g.phoneNumber(region)
	if num == nil {
		return g.phone()
	}
	if national {
		return g.nationalVariant(num, region)
	}
	return g.intlVariant(num, region)
}

func (g *heldOutGen) intlVariant(num *phonenumbers.PhoneNumber, region string) heldValue {
	intl := phonenumbers.Format(num, phonenumbers.INTERNATIONAL)
	cc := "+" + strconv.Itoa(int(num.GetCountryCode()))
	v := heldValue{entity: pii.Phone}
	switch g.r.IntN(7) {
	case 0:
		v.text, v.kind = phonenumbers.Format(num, phonenumbers.E164), "e164"
	case 1:
		v.text, v.kind = strings.ReplaceAll(intl, " ", "-"), "international-dashes"
	case 2:
		v.text, v.kind = strings.NewReplacer(" ", ".", "-", ".").Replace(intl), "international-dots"
	case 3:
		v.text, v.kind = "00"+intl[1:], "international-00"
	case 4:
		v.prefix, v.text, v.kind = "tel:", strings.TrimPrefix(phonenumbers.Format(num, phonenumbers.RFC3966), "tel:"), "rfc3966"
	case 5:
		if phonenumbers.GetNddPrefixForRegion(region, true) == "0" && strings.HasPrefix(intl, cc+" ") {
			v.text, v.kind = cc+" (0)"+intl[len(cc)+1:], "international-(0)"
			break
		}
		fallthrough
	default:
		v.text, v.kind = intl, "international"
	}
	v.kind += " " + region
	return v
}

func (g *heldOutGen) nationalVariant(num *phonenumbers.PhoneNumber, region string) heldValue {
	nat := phonenumbers.Format(num, phonenumbers.NATIONAL)
	v := heldValue{entity: pii.Phone}
	switch g.r.IntN(8) {
	case 0:
		v.text, v.kind = strings.ReplaceAll(nat, " ", "-"), "national-dashes"
	case 1:
		v.text, v.kind = strings.ReplaceAll(nat, "-", " "), "national-spaces"
	case 2:
		v.text, v.kind = phonenumbers.NormalizeDigitsOnly(nat), "national-compact"
	case 3:
		if region == "US" {
			d := phonenumbers.GetNationalSignificantNumber(num)
			v.text, v.kind = g.pick(d[:3]+"-"+d[3:6]+"-"+d[6:], d[:3]+"."+d[3:6]+"."+d[6:], "1-"+d[:3]+"-"+d[3:6]+"-"+d[6:]), "national-us-variant"
			break
		}
		fallthrough
	default:
		v.text, v.kind = nat, "national"
	}
	v.kind += " " + region
	return v
}
