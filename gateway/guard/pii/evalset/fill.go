package evalset

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"

	"github.com/neuronetes/neuronetes/gateway/guard/pii"
)

var (
	firstNames = []string{"Maria", "James", "Aiko", "Olu", "Sven", "Priya", "Lucas", "Fatima", "Chen", "Emma", "Diego", "Noor"}
	lastNames  = []string{"Garcia", "Smith", "Tanaka", "Adeyemi", "Larsen", "Sharma", "Moreau", "Haddad", "Wei", "Novak", "Silva", "Khan"}
	cities     = []string{"Springfield", "Lyon", "Osaka", "Lagos", "Bergen", "Pune", "Porto", "Austin", "Leeds", "Graz"}
	streets    = []string{"Elm", "Rue de la Paix", "Sakura", "Marina", "Fjord", "MG", "Oak", "Main", "Station", "Park"}
	countries  = []string{"Norway", "Japan", "Brazil", "Kenya", "Canada", "India", "Portugal", "Germany", "Mexico"}
	orgs       = []string{"Acme Corp", "Globex", "Initech", "Umbrella Ltd", "Stark Industries", "Wayne Enterprises"}
	domains    = []string{"example.com", "mail.example.org", "corp.example.net", "uni.example.edu", "example.co.uk"}
	jobs       = []string{"engineer", "nurse", "teacher", "pilot", "accountant", "chef"}
)

func pick(r *rand.Rand, xs []string) string { return xs[r.IntN(len(xs))] }

func digits(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte('0' + r.IntN(10))
	}
	return string(b)
}

// fill returns a value for a placeholder and its entity ("" when it is not a detector type).
func fill(r *rand.Rand, name string) (string, pii.Entity) {
	switch name {
	case "credit_card_number":
		return card(r, true), pii.CreditCard
	case "iban":
		return iban(r, true), pii.IBAN
	case "phone_number":
		return phone(r), pii.Phone
	case "email", "email_address":
		return email(r), pii.Email
	case "ip_address":
		return ip(r), pii.IPAddress
	case "ssn", "us_ssn":
		return ssn(r, true), pii.USSSN
	case "bad_card":
		return card(r, false), ""
	case "bad_iban":
		return iban(r, false), ""
	case "bad_ssn":
		return ssn(r, false), ""
	}
	return filler(r, name), ""
}

func filler(r *rand.Rand, name string) string {
	switch name {
	case "first_name", "first_name_male", "first_name_female", "first_name_nonbinary", "name_female", "name_male":
		return pick(r, firstNames)
	case "last_name", "last_name_male", "last_name_female":
		return pick(r, lastNames)
	case "person", "name":
		return pick(r, firstNames) + " " + pick(r, lastNames)
	case "city":
		return pick(r, cities)
	case "street_name":
		return pick(r, streets) + " Street"
	case "address":
		return fmt.Sprintf("%d %s Street, %s %s", 1+r.IntN(9999), pick(r, streets), pick(r, cities), digits(r, 5))
	case "secondary_address":
		return fmt.Sprintf("Apt. %d", 1+r.IntN(999))
	case "building_number":
		return strconv.Itoa(1 + r.IntN(9999))
	case "country", "nationality", "nation_woman", "nation_plural":
		return pick(r, countries)
	case "organization":
		return pick(r, orgs)
	case "age":
		return strconv.Itoa(18 + r.IntN(70))
	case "year":
		return strconv.Itoa(1950 + r.IntN(75))
	case "postcode", "zipcode":
		return digits(r, 5)
	case "date_time":
		return fmt.Sprintf("20%02d-%02d-%02d %02d:%02d", r.IntN(25), 1+r.IntN(12), 1+r.IntN(28), r.IntN(24), r.IntN(60))
	case "date_of_birth":
		if r.IntN(2) == 0 {
			return fmt.Sprintf("%02d/%02d/19%02d", 1+r.IntN(12), 1+r.IntN(28), 40+r.IntN(60))
		}
		return fmt.Sprintf("19%02d-%02d-%02d", 40+r.IntN(60), 1+r.IntN(12), 1+r.IntN(28))
	case "url":
		return fmt.Sprintf("https://www.%s/photos/%d", pick(r, domains), r.IntN(100000))
	case "job":
		return pick(r, jobs)
	case "state_abbr":
		return pick(r, []string{"CA", "NY", "TX", "WA"})
	case "us_driver_license":
		return "D" + digits(r, 7)
	case "order_id":
		return digits(r, 8+r.IntN(3))
	case "version":
		return fmt.Sprintf("%d.%d.%d", r.IntN(10), r.IntN(40), r.IntN(20))
	case "sha":
		return fmt.Sprintf("%016x", r.Uint64())
	case "uuid":
		return fmt.Sprintf("%08x-%04x-4%03x-a%03x-%012x", r.Uint32(), r.IntN(1<<16), r.IntN(1<<12), r.IntN(1<<12), r.Uint64()&0xffffffffffff)
	case "amount":
		return fmt.Sprintf("%d.%02d", r.IntN(100000), r.IntN(100))
	}
	return pick(r, firstNames)
}

// card draws a number with a real issuer prefix; valid numbers carry the Luhn check digit,
// invalid ones any other digit.
func card(r *rand.Rand, valid bool) string {
	type net struct {
		prefix string
		length int
		groups []int
	}
	nets := []net{{"4", 16, []int{4, 4, 4, 4}}, {"51", 16, []int{4, 4, 4, 4}}, {"55", 16, []int{4, 4, 4, 4}},
		{"2221", 16, []int{4, 4, 4, 4}}, {"37", 15, []int{4, 6, 5}}, {"34", 15, []int{4, 6, 5}},
		{"6011", 16, []int{4, 4, 4, 4}}, {"3530", 16, []int{4, 4, 4, 4}}, {"36", 14, []int{4, 6, 4}}}
	n := nets[r.IntN(len(nets))]
	body := n.prefix + digits(r, n.length-len(n.prefix)-1)
	check := luhnDigit(body)
	if !valid {
		check = (check + 1 + r.IntN(9)) % 10
	}
	num := body + strconv.Itoa(check)
	switch r.IntN(3) {
	case 0:
		return num
	case 1:
		return group(num, n.groups, " ")
	}
	return group(num, n.groups, "-")
}

func luhnDigit(body string) int {
	for d := 0; d < 10; d++ {
		if pii.Luhn(body + strconv.Itoa(d)) {
			return d
		}
	}
	return 0
}

func group(s string, sizes []int, sep string) string {
	var parts []string
	for _, n := range sizes {
		parts = append(parts, s[:n])
		s = s[n:]
	}
	return strings.Join(parts, sep)
}

// iban draws an IBAN of a common country with the right (or, invalid, a wrong) check digits.
func iban(r *rand.Rand, valid bool) string {
	type c struct {
		cc   string
		bban func() string
	}
	letters := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte('A' + r.IntN(26))
		}
		return string(b)
	}
	cs := []c{
		{"DE", func() string { return digits(r, 18) }},
		{"GB", func() string { return letters(4) + digits(r, 14) }},
		{"FR", func() string { return digits(r, 10) + letters(1) + digits(r, 10) + digits(r, 2) }},
		{"NL", func() string { return letters(4) + digits(r, 10) }},
		{"ES", func() string { return digits(r, 20) }},
		{"IT", func() string { return letters(1) + digits(r, 10) + digits(r, 12) }},
		{"BE", func() string { return digits(r, 12) }},
		{"CH", func() string { return digits(r, 17) }},
		{"PL", func() string { return digits(r, 24) }},
		{"NO", func() string { return digits(r, 11) }},
	}
	x := cs[r.IntN(len(cs))]
	bban := x.bban()
	// Check digits run 02..98: exactly one of those 97 values makes the IBAN valid.
	chk := 98 - mod97(bban+x.cc+"00")
	if !valid {
		bad := 2 + r.IntN(97)
		if bad == chk {
			bad = 2 + (bad-2+1)%97
		}
		chk = bad
	}
	s := fmt.Sprintf("%s%02d%s", x.cc, chk, bban)
	if r.IntN(2) == 0 {
		return s
	}
	var parts []string
	for len(s) > 4 {
		parts = append(parts, s[:4])
		s = s[4:]
	}
	return strings.Join(append(parts, s), " ")
}

func mod97(s string) int {
	rem := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'A' && c <= 'Z' {
			rem = (rem*100 + int(c-'A') + 10) % 97
		} else {
			rem = (rem*10 + int(c-'0')) % 97
		}
	}
	return rem
}

func ssn(r *rand.Rand, valid bool) string {
	area := 1 + r.IntN(899)
	for area == 666 {
		area = 1 + r.IntN(899)
	}
	if !valid {
		area = []int{0, 666, 900 + r.IntN(100)}[r.IntN(3)]
	}
	sep := "-"
	if r.IntN(5) == 0 {
		sep = " "
	}
	return fmt.Sprintf("%03d%s%02d%s%04d", area, sep, 1+r.IntN(99), sep, 1+r.IntN(9999))
}

// nanp draws a NANP number: area code and exchange NXX, the area code not an N11 service code.
func nanp(r *rand.Rand) (string, string, string) {
	area := strconv.Itoa(2+r.IntN(8)) + digits(r, 2)
	for area[1:] == "11" {
		area = strconv.Itoa(2+r.IntN(8)) + digits(r, 2)
	}
	return area, strconv.Itoa(2+r.IntN(8)) + digits(r, 2), digits(r, 4)
}

func phone(r *rand.Rand) string {
	a, b, c := nanp(r)
	switch r.IntN(9) {
	case 0:
		return fmt.Sprintf("(%s) %s-%s", a, b, c)
	case 1:
		return fmt.Sprintf("%s-%s-%s", a, b, c)
	case 2:
		return fmt.Sprintf("+1 %s %s %s", a, b, c)
	case 3:
		return fmt.Sprintf("%s.%s.%s", a, b, c)
	case 4:
		return fmt.Sprintf("+44 20 %s %s", digits(r, 4), digits(r, 4))
	case 5:
		return fmt.Sprintf("020 %s %s", digits(r, 4), digits(r, 4))
	case 6:
		return fmt.Sprintf("+33 %d %s %s %s %s", 1+r.IntN(9), digits(r, 2), digits(r, 2), digits(r, 2), digits(r, 2))
	case 7:
		return fmt.Sprintf("+49 30 %s", digits(r, 8))
	}
	return fmt.Sprintf("1-%s-%s-%s", a, b, c)
}

func email(r *rand.Rand) string {
	f, l := strings.ToLower(pick(r, firstNames)), strings.ToLower(pick(r, lastNames))
	switch r.IntN(4) {
	case 0:
		return f + "." + l + "@" + pick(r, domains)
	case 1:
		return f + l[:1] + strconv.Itoa(r.IntN(100)) + "@" + pick(r, domains)
	case 2:
		return f + "+news@" + pick(r, domains)
	}
	return l + "_" + f + "@" + pick(r, domains)
}

func ip(r *rand.Rand) string {
	if r.IntN(4) == 0 {
		var b [16]byte
		for i := range b {
			b[i] = byte(r.IntN(256))
		}
		b[0], b[1] = 0x20, 0x01
		if r.IntN(2) == 0 {
			for i := 6; i < 12; i++ {
				b[i] = 0
			}
		}
		return netip.AddrFrom16(b).String()
	}
	return fmt.Sprintf("%d.%d.%d.%d", 1+r.IntN(223), r.IntN(256), r.IntN(256), 1+r.IntN(254))
}
