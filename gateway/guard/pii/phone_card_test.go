package pii

import (
	"strconv"
	"strings"
	"testing"
)

// withLuhn appends the Luhn check digit to body.
func withLuhn(body string) string {
	for d := 0; d < 10; d++ {
		if s := body + strconv.Itoa(d); Luhn(s) {
			return s
		}
	}
	panic("unreachable")
}

func TestCardRangesAndLengths(t *testing.T) {
	cases := []struct {
		name, number, kind string // kind "" means: no card
	}{
		{"maestro 12", withLuhn("50181234567"), "maestro"},
		{"maestro 19", withLuhn("676312345678901234"), "maestro"},
		{"jcb legacy 1800", withLuhn("18001234567890"), "jcb"},
		{"jcb legacy 2131", withLuhn("21311234567890"), "jcb"},
		{"jcb 19", withLuhn("353012345678901234"), "jcb"},
		{"visa 19", withLuhn("411111111111111111"), "visa"},
		{"visa 13", withLuhn("422222222222"), "visa"},
		{"mastercard 2720", withLuhn("272012345678901"), "mastercard"},
		{"mir", withLuhn("220012345678901"), "mir"},
		{"unionpay 19", withLuhn("621234567890123456"), "unionpay"},
		{"unionpay 81", withLuhn("810012345678901"), "unionpay"},
		{"discover 644", withLuhn("644012345678901"), "discover"},
		{"diners 14", withLuhn("3612345678901"), "diners"},
		{"diners 3095", withLuhn("309512345678901"), "diners"},
		{"rupay 60", withLuhn("607012345678901"), "rupay"},
		{"verve", withLuhn("506099123456789"), "verve"},
		{"troy", withLuhn("979212345678901"), "troy"},
		{"uatp", withLuhn("12345678901234"), "uatp"},
		{"near-miss: visa 15", withLuhn("41111111111111"), ""},
		{"near-miss: mastercard 15", withLuhn("51051051051051"), ""},
		{"near-miss: amex 16", withLuhn("378282246310005"), ""},
		{"near-miss: jcb legacy 16", withLuhn("180012345678901"), ""},
		{"near-miss: no issuer 0", withLuhn("012345678901234"), ""},
		{"near-miss: no issuer 7", withLuhn("712345678901234"), ""},
		{"near-miss: maestro 11", withLuhn("5018123456"), ""},
		{"near-miss: uatp 16", withLuhn("123456789012345"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := cardKind(c.number); got != c.kind {
				t.Fatalf("cardKind(%s) = %q, want %q", c.number, got, c.kind)
			}
			fs := New(Options{MinScore: 0.5, Entities: []Entity{CreditCard}}).Detect("card " + c.number + " ok")
			if found := len(fs) == 1; found != (c.kind != "") {
				t.Fatalf("Detect(card %s) = %+v", c.number, fs)
			}
		})
	}
}

func TestCardInsideIdentifiers(t *testing.T) {
	card, maestro12 := "4111111111111111", withLuhn("50181234567")
	for _, text := range []string{"ref 12-" + card, card + "-07", card + ".5", "REF" + card, "id_" + card, "ORD-" + card + " done", "SN-" + card + "-A"} {
		if fs := detectAll(text); len(fs) != 0 {
			t.Errorf("%q: want no finding, got %+v", text, fs)
		}
	}
	for _, text := range []string{"card " + card + ".", "(" + card + ")", "card: " + card + ", exp 12/29", maestro12[:4] + " " + maestro12[4:8] + " " + maestro12[8:]} {
		if fs := detectAll(text); len(fs) != 1 || fs[0].Entity != CreditCard {
			t.Errorf("%q: want a card, got %+v", text, fs)
		}
	}
}

func TestPhoneFormats(t *testing.T) {
	cases := []struct {
		name, text, value, kind string // value "" means: no phone; kind "national-" is any region's
	}{
		{"de national", "Ruf an: 030 12345678", "030 12345678", "national-de"},
		{"de mobile", "Handy 0171 2345678", "0171 2345678", "national-de"},
		{"de premium with one-digit group", "Hotline 0900 1 230960", "0900 1 230960", "national-de"},
		{"fr service", "appelez le 0 806 12 26 66", "0 806 12 26 66", "national-fr"},
		{"jp dashes", "電話 03-1234-5678", "03-1234-5678", "national-"},
		{"jp mobile", "携帯 090-1234-5678", "090-1234-5678", "national-"},
		{"in mobile without trunk 0", "whatsapp 98765 43210", "98765 43210", "national-in"},
		{"br mobile", "celular (11) 91234-5678", "(11) 91234-5678", "national-br"},
		{"au mobile", "mob 0412 345 678", "0412 345 678", "national-"},
		{"nl mobile", "bel 06 12345678", "06 12345678", "national-nl"},
		{"es", "llame al 912 34 56 78", "912 34 56 78", "national-es"},
		{"it mobile", "chiama 312 345 6789", "312 345 6789", "national-"},
		{"mx", "tel 55 1234 5678", "55 1234 5678", "national-"},
		{"cn mobile", "手机 138 0013 8000", "138 0013 8000", "national-cn"},
		{"international (0)", "+44 (0)20 7946 0958", "+44 (0)20 7946 0958", "e164"},
		{"international dots", "+33.1.23.45.67.89", "+33.1.23.45.67.89", "e164"},
		{"international 00 own group", "00 49 30 12345678", "00 49 30 12345678", "e164"},
		{"international small region", "+354 551 2345", "+354 551 2345", "e164"},
		{"rfc3966", "tel:+1-415-555-2671", "+1-415-555-2671", "e164"},
		{"bare national with context", "mobile 07700900123", "07700900123", "national-"},
		{"near-miss: bare national without context", "ref 07700900123", "", ""},
		{"near-miss: order number is no context", "Order number 0228166833 totals", "", ""},
		{"near-miss: grouping of another region", "123-555-2671 is blocked", "", ""},
		{"near-miss: canadian sin", "SIN 515-863-215", "", ""},
		{"near-miss: zip+4", "postal 06487-5650", "", ""},
		{"near-miss: date and time", "on 22.10.2024 08:15 sharp", "", ""},
		{"near-miss: timestamp in parentheses", "started (1696464276183 ms)", "", ""},
		{"near-miss: identifier", "serial SN-0141-68665-A", "", ""},
		{"near-miss: inside a longer run", "parcel 9400 0044 9781 8063 5646 07", "", ""},
		{"near-miss: 00 before no country code", "order 005-9057487-3290383", "", ""},
		{"near-miss: list of numbers", "rows 1 2 3 45 6789 0", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := New(Options{MinScore: 0.5, Entities: []Entity{Phone}}).Detect(c.text)
			if c.value == "" {
				if len(got) != 0 {
					t.Fatalf("want no phone, got %q (%+v)", c.text[got[0].Start:got[0].End], got[0])
				}
				return
			}
			if len(got) != 1 || c.text[got[0].Start:got[0].End] != c.value || !(got[0].Kind == c.kind || c.kind == "national-" && strings.HasPrefix(got[0].Kind, c.kind)) {
				t.Fatalf("want %q (%s), got %+v", c.value, c.kind, got)
			}
		})
	}
}

func TestPhoneRegionsOption(t *testing.T) {
	// 0412 345 678 is Australian; 03-1234-5678 is Japanese and Australian, so the first region
	// listed names it. With only DE configured neither is validated, and both still fit the
	// trunk-0 shape rule (kind "national").
	text := "Ruf an: 030 12345678, 0412 345 678 oder 03-1234-5678"
	kinds := func(regions ...string) []string {
		var ks []string
		for _, f := range New(Options{MinScore: 0.5, PhoneRegions: regions}).Detect(text) {
			ks = append(ks, f.Kind)
		}
		return ks
	}
	if got := strings.Join(kinds("de"), " "); got != "national-de national national" {
		t.Fatalf("DE only: %s", got)
	}
	if got := strings.Join(kinds("JP", "AU"), " "); got != "national national-au national-jp" {
		t.Fatalf("JP and AU: %s", got)
	}
	if err := (Options{PhoneRegions: []string{"DE", "XX"}}).Validate(); err == nil || err.Error() != `phoneRegions[1]: "XX" is not a region libphonenumber knows` {
		t.Fatalf("Validate = %v", err)
	}
	if err := (Options{MinScore: 2}).Validate(); err == nil {
		t.Fatal("Validate accepted minScore 2")
	}
	if err := (Options{PhoneRegions: DefaultPhoneRegions, MinScore: 0.5}).Validate(); err != nil {
		t.Fatalf("Validate(defaults) = %v", err)
	}
}

func TestPhoneValidationBudget(t *testing.T) {
	// More candidates than the budget: the first are validated, the rest judged by shape only.
	d := New(Options{MinScore: 0.5})
	var text string
	for i := 0; i < 40; i++ {
		text += "lot 7730-2219, "
	}
	ps := &phoneScan{regions: d.recs[4].(numericRec).regions, minScore: 0.5, budget: phoneValidations + len(text)/validationBytes}
	start := ps.budget
	groups, _ := scanRun(text, 4)
	classifyRun(ps, text, groups, nil)
	if used := start - ps.budget; used == 0 || used > start {
		t.Fatalf("one candidate used %d of %d validations", used, start)
	}
	before := ps.budget
	for i := 0; i < 100; i++ {
		classifyRun(ps, text, groups, nil)
	}
	if ps.budget < 0 || ps.budget == before && before > 0 {
		t.Fatalf("budget %d -> %d after 100 more candidates", before, ps.budget)
	}
	// Past the budget, a number libphonenumber would validate is found by shape when the shape
	// rules accept it, and missed otherwise.
	ps.budget = 0
	shaped, f := "(415) 555-2671", window{}
	g, _ := scanRun(shaped, 0)
	f = makeWindow(shaped, g, 0, len(g)-1)
	if _, ok := ps.phone(shaped, f); !ok {
		t.Fatal("NANP shape not found past the budget")
	}
	in := "98765 43210" // valid in India, but no shape rule fits it
	g, _ = scanRun(in, 0)
	if _, ok := ps.phone(in, makeWindow(in, g, 0, len(g)-1)); ok {
		t.Fatal("a national number was validated past the budget")
	}
}
