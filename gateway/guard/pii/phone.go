package pii

import (
	"strings"

	"github.com/nyaruka/phonenumbers"
)

var phoneContext = []string{"phone", "tel", "call", "mobile", "cell", "fax", "whatsapp", "contact", "ring", "sms", "text me"}

// DefaultPhoneRegions are the regions (ISO 3166-1 alpha-2, as libphonenumber names them) whose
// national formats are recognized when Options.PhoneRegions is empty. Numbers written with "+" or
// "00" are recognized for every region libphonenumber knows.
var DefaultPhoneRegions = []string{"US", "GB", "DE", "FR", "ES", "IT", "NL", "IN", "JP", "CN", "BR", "MX", "AU"}

// phoneRegion is a region whose national numbers are validated.
type phoneRegion struct {
	code  string
	cc    int
	ndd   string // national (trunk) prefix digits, "" when none
	nanpa bool   // a region of the North American Numbering Plan: numbers of all of it count
}

// newPhoneRegion returns the region's parameters, or false when libphonenumber does not know it.
func newPhoneRegion(code string) (phoneRegion, bool) {
	code = strings.ToUpper(code)
	cc := phonenumbers.GetCountryCodeForRegion(code)
	if cc == 0 {
		return phoneRegion{}, false
	}
	return phoneRegion{code: code, cc: cc, ndd: phonenumbers.GetNddPrefixForRegion(code, true), nanpa: cc == 1}, true
}

// phoneValidations bounds the libphonenumber validations of one scan: a base plus one per
// validationBytes of text, so a text of nothing but number-like runs costs time linear in its
// length. Candidates past the budget are judged by the shape rules alone.
const (
	phoneValidations = 16
	validationBytes  = 512
)

// phoneScan is the state of one scan for phone numbers.
type phoneScan struct {
	regions  []phoneRegion
	minScore float64
	budget   int
	off      bool // phone numbers are not reported
}

// phone classifies a window as a phone number. A candidate of a plausible shape (phoneShape) is
// checked with libphonenumber: as an international number when written with "+" or "00",
// otherwise as a national number of each configured region in turn; it counts when libphonenumber
// finds it valid (an assigned range of its region) and, nationally, the trunk prefix is there
// where the region writes one and the groups are the region's. Candidates libphonenumber rejects,
// or that come past the scan's budget, fall back to the shape rules. A single bare run of digits
// scores low and counts only with a context word nearby.
func (s *phoneScan) phone(text string, w window) (Finding, bool) {
	if s.off || !phoneShape(text, w) {
		return Finding{}, false
	}
	intl := w.plus || intl00(w)
	score, kind, ok := 0.0, "", false
	if s.reachable(text, w, phoneBase(w, intl)) && s.budget > 0 {
		score, kind, ok = s.validate(w, intl)
	}
	if sc, k, sok := shapePhone(w); sok && (!ok || sc > score) {
		score, kind, ok = sc, k, true
	}
	if !ok {
		return Finding{}, false
	}
	return Finding{Entity: Phone, Start: w.start, End: w.end, Score: boosted(text, w.start, score, phoneContext), Kind: kind}, true
}

// phoneBase is the score of a libphonenumber-valid number by how it is written: with "+", with
// "00", in groups or parentheses, or as one bare run of digits.
func phoneBase(w window, intl bool) float64 {
	switch {
	case w.plus:
		return 0.85
	case intl:
		return 0.75
	case len(w.lens) > 1 || w.paren:
		return 0.6
	}
	return 0.3
}

// reachable reports whether a finding of base score could reach the scan's minimum score.
func (s *phoneScan) reachable(text string, w window, base float64) bool {
	return base >= s.minScore || base+contextBoost >= s.minScore && hasContext(text, w.start, phoneContext)
}

// validate checks the window with libphonenumber and returns its score and kind when valid. The
// number is built from the window's digits (no parse of the text): an international one splits
// off its country calling code, a national one its trunk prefix; libphonenumber then decides
// whether the region assigns it.
func (s *phoneScan) validate(w window, intl bool) (float64, string, bool) {
	if intl {
		num := internationalNumber(strings.TrimPrefix(w.digits, "00"))
		if num == nil {
			return 0, "", false
		}
		s.budget--
		if !phonenumbers.IsValidNumber(num) {
			return 0, "", false
		}
		return phoneBase(w, true), "e164", true
	}
	for i := range s.regions {
		r := &s.regions[i]
		if s.budget <= 0 {
			break
		}
		num := r.nationalNumber(w.digits)
		if num == nil {
			continue
		}
		s.budget--
		if !(phonenumbers.IsValidNumberForRegion(num, r.code) || r.nanpa && phonenumbers.IsValidNumber(num)) ||
			!phonenumbers.IsNationalPrefixPresentIfRequired(num) {
			continue
		}
		if len(w.lens) > 1 && !sameGroups(w, r.ndd, phonenumbers.Format(num, phonenumbers.NATIONAL)) {
			continue
		}
		return phoneBase(w, false), "national-" + strings.ToLower(r.code), true
	}
	return 0, "", false
}

// sameGroups reports whether the window's digit groups are those of the region's national
// format of the number ("030 12345678", "(415) 555-2671"), a trunk prefix aside: "123-555-2671"
// is no Indian number (whose area code would be 1235), "515-863-215" no Spanish one.
func sameGroups(w window, ndd, formatted string) bool {
	var want []string
	for i := 0; i < len(formatted); {
		j := i
		for j < len(formatted) && isDigit(formatted[j]) {
			j++
		}
		if j > i {
			want = append(want, formatted[i:j])
			i = j
		} else {
			i++
		}
	}
	got := make([]string, 0, len(w.lens))
	pos := 0
	for _, l := range w.lens {
		got = append(got, w.digits[pos:pos+l])
		pos += l
	}
	if ndd != "" && len(got) > 1 && got[0] == ndd {
		got = got[1:] // "1-800-555-0199", "0 800 ..."
	}
	if ndd != "" && len(want) > 1 && want[0] == ndd {
		want = want[1:] // France writes "0 806 12 26 66"
	}
	if len(got) != len(want) || len(want) == 0 {
		return false
	}
	if ndd != "" {
		got[0], want[0] = strings.TrimPrefix(got[0], ndd), strings.TrimPrefix(want[0], ndd)
	}
	for i := range got {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

// phoneShape is the cheap filter every phone candidate passes: 7-14 digits (8-15 after "+" or
// "00"), at most seven groups of which only the first, a group right after a country code, a
// "(0)" trunk group and one other ("0900 1 230960") have one digit, separators of printed phone numbers (space, '-', '.', one
// '/', parentheses; '.' with no other), an opening parenthesis closed after the first group, no
// date inside, not part of a longer run of groups joined as its own are, and not glued to an
// identifier ("SN-0141-68665-A").
func phoneShape(text string, w window) bool {
	n := len(w.digits)
	intl := w.plus || intl00(w)
	if intl && !w.plus {
		n -= 2
	}
	if intl && (n < 8 || n > 15) || !intl && (n < 7 || n > 14) || len(w.lens) > 7 {
		return false
	}
	if !w.sameSepsAny(" ", "-", ".", "/", ") ", ")", "-(", " (", ")-", "(") || joins(w.before) || joins(w.after) || glued(text, w) {
		return false
	}
	if w.paren && (len(w.seps) == 0 || w.seps[0][0] != ')') {
		return false // "(1696464276183 ms)"
	}
	var slashes, dots, others int
	for _, s := range w.seps {
		slashes += strings.Count(s, "/")
		dots += strings.Count(s, ".")
		others += len(s) - strings.Count(s, ".")
	}
	if slashes > 1 || dots > 0 && others > 0 {
		return false
	}
	if w.before != 0 && (len(w.seps) == 0 || strings.IndexByte(w.seps[0], w.before) >= 0) ||
		w.after != 0 && (len(w.seps) == 0 || strings.IndexByte(w.seps[len(w.seps)-1], w.after) >= 0) {
		return false // the run goes on the way the window is joined: "9400 0044 9781 8063 5646 07"
	}
	ones := 0
	for i := 1; i < len(w.lens); i++ {
		trunk := strings.HasSuffix(w.seps[i-1], "(") && i < len(w.seps) && strings.HasPrefix(w.seps[i], ")")
		if w.lens[i] == 1 && !(i == 1 && intl) && !trunk {
			ones++
		}
	}
	if ones > 1 {
		return false // "1 2 3 45 6789" is a list of numbers
	}
	if len(w.lens) == 3 && w.lens[0] == 3 && w.lens[1] == 2 && w.lens[2] == 4 && !intl {
		return false // the shape of a US SSN, not of a phone number
	}
	if len(w.lens) == 2 && w.lens[0] == 5 && w.lens[1] == 4 && w.seps[0] == "-" {
		return false // the shape of a US ZIP+4 code
	}
	if intl00(w) && w.lens[0] > 2 && !validCC(w.digits[2:w.lens[0]]) {
		return false // "005-9057487-3290383": "00" and a country code make the first group
	}
	return !hasDate(w)
}

// glued reports whether the window is part of an identifier: a '-', '.', '/' or '_' joins it to
// a letter or digit before it ("ORD-05377809", "SN-0141-68665-A"), or to a digit after it, or an
// '_' to a letter after it. A label after a dash ("...-Office") does not glue.
func glued(text string, w window) bool {
	s, e := w.start, w.end
	if s >= 2 && strings.IndexByte("-./_", text[s-1]) >= 0 && isAlnum(text[s-2]) {
		return true
	}
	if e+1 >= len(text) {
		return false
	}
	c, d := text[e], text[e+1]
	return strings.IndexByte("-./_", c) >= 0 && isDigit(d) || c == '_' && isAlnum(d)
}

// validCC reports whether d is a country calling code libphonenumber knows.
func validCC(d string) bool {
	if len(d) == 0 || len(d) > 3 {
		return false
	}
	return phonenumbers.GetRegionCodeForCountryCode(atoi(d)) != "ZZ"
}

// hasDate reports whether three consecutive groups of the window read as a date: 4-2-2, 2-2-4 or
// 1/2-1/2-4 digits joined twice by the same '-', '/' or '.'.
func hasDate(w window) bool {
	for i := 0; i+2 < len(w.lens); i++ {
		a, b, c := w.lens[i], w.lens[i+1], w.lens[i+2]
		s1, s2 := w.seps[i], w.seps[i+1]
		if s1 != s2 || s1 != "-" && s1 != "/" && s1 != "." {
			continue
		}
		if a == 4 && b <= 2 && c <= 2 || a <= 2 && b <= 2 && c == 4 {
			return true
		}
	}
	return false
}
