package pii

import (
	"strings"
	"testing"
)

// detectAll runs the detector at the policies' default minimum score.
func detectAll(text string) []Finding { return New(Options{MinScore: 0.5}).Detect(text) }

func TestDetectors(t *testing.T) {
	cases := []struct {
		name   string
		text   string
		entity Entity // "" means: no finding at all
		value  string // the exact matched value
	}{
		// e-mail
		{"email plain", "write to jane.doe@example.com today", Email, "jane.doe@example.com"},
		{"email plus tag, sentence dot", "Mail bob+news@mail.example.co.uk.", Email, "bob+news@mail.example.co.uk"},
		{"email in angle brackets", "From: <ops@neuronetes.io>", Email, "ops@neuronetes.io"},
		{"near-miss: handle", "ping @jane on chat", "", ""},
		{"near-miss: no tld", "user@localhost is local", "", ""},
		{"near-miss: double dot", "a..b@example.com", Email, "b@example.com"},
		{"ip literal after @ is an ip", "x@1.2.3.4", IPAddress, "1.2.3.4"},
		{"near-miss: hyphen label", "x@-bad.example.com", "", ""},
		// phones
		{"e164 compact", "call +14155552671 now", Phone, "+14155552671"},
		{"e164 spaced uk", "my number is +44 20 7946 0958", Phone, "+44 20 7946 0958"},
		{"e164 de dashed", "+49-30-12345678", Phone, "+49-30-12345678"},
		{"nanp parens", "Phone: (415) 555-2671", Phone, "(415) 555-2671"},
		{"nanp dashes", "reach me at 415-555-2671", Phone, "415-555-2671"},
		{"nanp dots", "415.555.2671 is the desk", Phone, "415.555.2671"},
		{"nanp with 1", "dial 1-800-555-0199", Phone, "1-800-555-0199"},
		{"uk national", "ring 020 7946 0958", Phone, "020 7946 0958"},
		{"fr national", "tél 01 23 45 67 89", Phone, "01 23 45 67 89"},
		{"00 international", "0044 20 7946 0958", Phone, "0044 20 7946 0958"},
		{"bare ten digits with context", "phone 4155552671", Phone, "4155552671"},
		{"near-miss: bare ten digits", "order 4155552671 shipped", "", ""},
		{"near-miss: unassigned country code", "+999 1234 5678", "", ""},
		{"near-miss: date", "on 2024-01-15 we met", "", ""},
		{"near-miss: us date", "due 12/25/2024", "", ""},
		{"near-miss: area code 1xx", "123-555-2671", "", ""},
		{"near-miss: isbn", "ISBN 978-3-16-148410-0", "", ""},
		{"near-miss: version", "v1.22.3 released", "", ""},
		{"near-miss: too short e164", "+1 234", "", ""},
		// cards
		{"visa spaced", "card 4111 1111 1111 1111 exp 12/29", CreditCard, "4111 1111 1111 1111"},
		{"mastercard dashed", "5555-5555-5555-4444", CreditCard, "5555-5555-5555-4444"},
		{"mastercard 2-series", "2223003122003222", CreditCard, "2223003122003222"},
		{"amex 4-6-5", "AMEX 3782 822463 10005", CreditCard, "3782 822463 10005"},
		{"discover compact", "6011111111111117", CreditCard, "6011111111111117"},
		{"jcb", "3530111333300000", CreditCard, "3530111333300000"},
		{"diners", "30569309025904", CreditCard, "30569309025904"},
		{"near-miss: luhn off by one", "4111 1111 1111 1112", "", ""},
		{"near-miss: luhn ok, no issuer", "1234567812345670", "", ""},
		{"near-miss: mixed separators", "4111-1111 1111-1111", "", ""},
		{"near-miss: odd grouping", "41 1111 1111 1111 11", "", ""},
		{"near-miss: glued to letters", "id4111111111111111", "", ""},
		{"near-miss: inside a longer grouped number", "PL56 8272 2326 1637 2939 6787 3629 fails", "", ""},
		// IBAN
		{"iban gb grouped", "IBAN: GB82 WEST 1234 5698 7654 32.", IBAN, "GB82 WEST 1234 5698 7654 32"},
		{"iban de compact", "DE89370400440532013000", IBAN, "DE89370400440532013000"},
		{"iban fr letters", "FR1420041010050500013M02606", IBAN, "FR1420041010050500013M02606"},
		{"iban no 15 chars", "NO9386011117947", IBAN, "NO9386011117947"},
		{"near-miss: iban bad check", "GB82WEST12345698765433", "", ""},
		{"near-miss: iban short", "GB82 WEST 1234 5698 7654", "", ""},
		{"near-miss: iban unknown country", "ZZ82WEST12345698765432", "", ""},
		// SSN
		{"ssn dashed", "SSN 536-90-4399", USSSN, "536-90-4399"},
		{"ssn spaced with context", "social security 536 90 4399", USSSN, "536 90 4399"},
		{"ssn bare with context", "my ssn is 536904399", USSSN, "536904399"},
		{"near-miss: ssn area 000", "000-12-3456", "", ""},
		{"near-miss: ssn area 666", "666-12-3456", "", ""},
		{"near-miss: ssn area 9xx", "912-12-3456", "", ""},
		{"near-miss: ssn group 00", "536-00-4399", "", ""},
		{"near-miss: ssn serial 0000", "536-90-0000", "", ""},
		{"near-miss: ssn example", "078-05-1120", "", ""},
		{"near-miss: bare nine digits", "tracking 536904399", "", ""},
		// IP
		{"ipv4", "host 192.168.10.24 is down", IPAddress, "192.168.10.24"},
		{"ipv4 zeros", "0.0.0.0", IPAddress, "0.0.0.0"},
		{"ipv6 full", "addr 2001:0db8:85a3:0000:0000:8a2e:0370:7334 ok", IPAddress, "2001:0db8:85a3:0000:0000:8a2e:0370:7334"},
		{"ipv6 compressed", "ping fe80::1ff:fe23:4567:890a", IPAddress, "fe80::1ff:fe23:4567:890a"},
		{"ipv6 mapped v4", "::ffff:192.0.2.128", IPAddress, "::ffff:192.0.2.128"},
		{"near-miss: octet 256", "10.0.0.256", "", ""},
		{"near-miss: five parts", "1.2.3.4.5", "", ""},
		{"near-miss: leading zero octet", "10.01.2.3", "", ""},
		{"near-miss: time", "at 12:30:45 sharp", "", ""},
		{"near-miss: mac", "00:1A:2B:3C:4D:5E", "", ""},
		{"near-miss: c++ scope", "std::vector<int>", "", ""},
		// secrets
		{"aws key", "AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE", APIKey, "AKIAIOSFODNN7EXAMPLE"},
		{"github token", "token ghp_" + strings.Repeat("a1B2", 9) + " used", APIKey, "ghp_" + strings.Repeat("a1B2", 9)},
		{"slack bot", "xoxb-123456789012-1234567890123-abcdefABCDEF", APIKey, "xoxb-123456789012-1234567890123-abcdefABCDEF"},
		{"stripe", "sk_live_" + strings.Repeat("x9", 12), APIKey, "sk_live_" + strings.Repeat("x9", 12)},
		{"google", "key=AIza" + strings.Repeat("b", 35), APIKey, "AIza" + strings.Repeat("b", 35)},
		{"jwt", "Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U", APIKey,
			"eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"},
		{"near-miss: akia too short", "AKIAIOSFODNN7", "", ""},
		{"near-miss: ghp too short", "ghp_abc", "", ""},
		{"near-miss: inside identifier", "myAKIAIOSFODNN7EXAMPLE", "", ""},
		{"private key", "x\n-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----\ny", PrivateKey,
			"-----BEGIN RSA PRIVATE KEY-----\nMIIEow\n-----END RSA PRIVATE KEY-----"},
		{"openssh key unterminated", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn", PrivateKey, "-----BEGIN OPENSSH PRIVATE KEY-----\nb3Blbn"},
		{"near-miss: public key", "-----BEGIN PUBLIC KEY-----\nMIIB\n-----END PUBLIC KEY-----", "", ""},
		{"near-miss: certificate", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----", "", ""},
		// prose
		{"plain prose", "The quick brown fox jumps over 13 lazy dogs in 2024.", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := detectAll(c.text)
			if c.entity == "" {
				if len(got) != 0 {
					t.Fatalf("want no finding, got %+v (%q)", got, c.text[got[0].Start:got[0].End])
				}
				return
			}
			if len(got) != 1 {
				t.Fatalf("want one %s, got %+v", c.entity, got)
			}
			f := got[0]
			if f.Entity != c.entity || c.text[f.Start:f.End] != c.value {
				t.Fatalf("want %s %q, got %s %q (score %.2f)", c.entity, c.value, f.Entity, c.text[f.Start:f.End], f.Score)
			}
		})
	}
}

func TestLuhnAndIBAN(t *testing.T) {
	for _, c := range []struct {
		s    string
		luhn bool
	}{{"79927398713", true}, {"79927398710", false}, {"0", false}, {"4111111111111111", true}, {"41111x1111111111", false}} {
		if Luhn(c.s) != c.luhn {
			t.Errorf("Luhn(%q) = %v", c.s, !c.luhn)
		}
	}
	for _, c := range []struct {
		s  string
		ok bool
	}{{"GB82WEST12345698765432", true}, {"GB82WEST12345698765423", false}, {"BE68539007547034", true}, {"BE6853900754703", false}, {"gb82WEST12345698765432", false}} {
		if IBANValid(c.s) != c.ok {
			t.Errorf("IBANValid(%q) = %v", c.s, !c.ok)
		}
	}
}

func TestEntitiesFilterAndRedact(t *testing.T) {
	text := "mail a@example.com, card 4111111111111111, ip 10.1.2.3"
	d := New(Options{Entities: []Entity{CreditCard}})
	fs := d.Detect(text)
	if len(fs) != 1 || fs[0].Entity != CreditCard {
		t.Fatalf("filter: %+v", fs)
	}
	all := New(Options{}).Detect(text)
	if len(all) != 3 {
		t.Fatalf("all: %+v", all)
	}
	got := Redact(text, all)
	want := "mail <EMAIL_ADDRESS>, card <CREDIT_CARD>, ip <IP_ADDRESS>"
	if got != want {
		t.Fatalf("Redact = %q, want %q", got, want)
	}
}

func TestMultipleValuesInOneRun(t *testing.T) {
	text := "4111 1111 1111 1111 415-555-2671"
	fs := New(Options{}).Detect(text)
	if len(fs) != 2 || fs[0].Entity != CreditCard || fs[1].Entity != Phone {
		t.Fatalf("got %+v", fs)
	}
}

func TestContextRaisesScore(t *testing.T) {
	plain := New(Options{}).Detect("x 536 90 4399")
	ctx := New(Options{}).Detect("ssn 536 90 4399")
	if len(plain) != 1 || len(ctx) != 1 || ctx[0].Score <= plain[0].Score {
		t.Fatalf("plain %+v ctx %+v", plain, ctx)
	}
}

func FuzzDetect(f *testing.F) {
	f.Add("call +1 (415) 555-2671 or a@b.co, 4111 1111 1111 1111 DE89370400440532013000 ::1")
	f.Fuzz(func(t *testing.T, s string) {
		fs := New(Options{}).Detect(s)
		last := 0
		for _, x := range fs {
			if x.Start < last || x.End > len(s) || x.Start >= x.End {
				t.Fatalf("bad span %+v in %q", x, s)
			}
			last = x.End
		}
	})
}
