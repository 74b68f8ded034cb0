package pii

// card classifies a window as a payment card number: 12-19 digits, compact or in a printed
// grouping, an issuer identification number (IIN) range of a network that issues numbers of that
// length, and a valid Luhn check digit. A window that continues a longer number (more four-digit
// groups, or digits joined by '-', '.' or '/') is not a card.
func card(text string, w window) (Finding, bool) {
	n := len(w.digits)
	if n < 12 || w.plus || !w.sameSeps(" ", "-") {
		return Finding{}, false
	}
	if len(w.lens) > 1 && !cardGrouping(w.lens) {
		return Finding{}, false
	}
	if len(w.lens) > 1 && (w.before == w.seps[0][0] && w.prevLen == 4 || w.after == w.seps[0][0] && w.nextLen == 4) {
		return Finding{}, false // four-digit groups go on: part of a longer grouped number (an IBAN, an account)
	}
	if len(w.lens) == 1 && (joins(w.before) || joins(w.after)) || glued(text, w) {
		return Finding{}, false // "12-4111111111111111", "4111111111111111.5": part of an identifier
	}
	kind := cardKind(w.digits)
	if kind == "" || !Luhn(w.digits) || allSame(w.digits) {
		return Finding{}, false
	}
	start := w.start
	if w.paren {
		start++ // "(4111 1111 1111 1111)": the parenthesis is the sentence's
	}
	return Finding{Entity: CreditCard, Start: start, End: w.end, Score: 1, Kind: kind}, true
}

// joins reports whether separator byte c glues digit groups into one identifier.
func joins(c byte) bool { return c == '-' || c == '.' || c == '/' }

// cardGrouping accepts the printed groupings of card numbers: 4-4-4, 4-4-4-1..4, 4-4-4-4-1..3,
// 4-6-5, 4-6-4 and 4-4-5.
func cardGrouping(l []int) bool {
	switch len(l) {
	case 3:
		return l[0] == 4 && (l[1] == 6 && (l[2] == 5 || l[2] == 4) || l[1] == 4 && (l[2] == 5 || l[2] == 4))
	case 4:
		return l[0] == 4 && l[1] == 4 && l[2] == 4 && l[3] >= 1 && l[3] <= 4
	case 5:
		return l[0] == 4 && l[1] == 4 && l[2] == 4 && l[3] == 4 && l[4] <= 3
	}
	return false
}

// iinRange is a range of issuer identification numbers: numbers whose first len(lo) digits lie
// in [lo, hi] and whose length is in lens.
type iinRange struct {
	lo, hi string
	lens   lengthSet
	kind   string
}

// lengthSet is a set of card lengths, bit n for length n.
type lengthSet uint32

func lengths(ns ...int) lengthSet {
	var s lengthSet
	for _, n := range ns {
		s |= 1 << n
	}
	return s
}

func lengthRange(lo, hi int) lengthSet {
	var s lengthSet
	for n := lo; n <= hi; n++ {
		s |= 1 << n
	}
	return s
}

func (s lengthSet) has(n int) bool { return n < 32 && s&(1<<n) != 0 }

// iinRanges are the published IIN ranges of the card networks (ISO/IEC 7812 issuer numbers as
// the networks publish them) with the lengths each issues. Where ranges nest the more specific
// one comes first and names the number; Maestro's broad 50 and 56-69 come last.
var iinRanges = []iinRange{
	{"6054740", "6054744", lengths(16), "nps"},
	{"60400100", "60420099", lengthRange(16, 19), "ukrcard"},
	{"506099", "506198", lengths(16, 18, 19), "verve"},
	{"507865", "507964", lengths(16, 18, 19), "verve"},
	{"650002", "650027", lengths(16, 18, 19), "verve"},
	{"622126", "622925", lengthRange(16, 19), "discover"}, // UnionPay co-branded, on Discover's network
	{"357111", "357111", lengths(16), "lankapay"},
	{"1800", "1800", lengths(15), "jcb"},
	{"2131", "2131", lengths(15), "jcb"},
	{"1946", "1946", lengths(16, 18, 19), "gpn"},
	{"2014", "2014", lengths(15), "diners"}, // enRoute
	{"2149", "2149", lengths(15), "diners"}, // enRoute
	{"2200", "2204", lengthRange(16, 19), "mir"},
	{"2205", "2205", lengths(16), "borica"},
	{"2221", "2720", lengths(16), "mastercard"},
	{"3095", "3095", lengthRange(14, 19), "diners"},
	{"3528", "3589", lengthRange(16, 19), "jcb"},
	{"5019", "5019", lengths(16), "dankort"},
	{"5614", "5614", lengths(16), "uzcard"},
	{"6011", "6011", lengthRange(16, 19), "discover"},
	{"8600", "8600", lengths(16), "uzcard"},
	{"9704", "9704", lengths(16, 19), "napas"},
	{"9792", "9792", lengths(16), "troy"},
	{"9860", "9860", lengths(16), "humo"},
	{"300", "305", lengthRange(14, 19), "diners"},
	{"353", "353", lengths(16), "rupay"},
	{"356", "356", lengths(16), "rupay"},
	{"508", "508", lengths(16), "rupay"},
	{"636", "636", lengthRange(16, 19), "interpayment"},
	{"637", "639", lengths(16), "instapayment"},
	{"644", "649", lengthRange(16, 19), "discover"},
	{"34", "34", lengths(15), "amex"},
	{"37", "37", lengths(15), "amex"},
	{"31", "31", lengths(19), "tunion"},
	{"36", "36", lengthRange(14, 19), "diners"},
	{"38", "39", lengthRange(14, 19), "diners"},
	{"51", "55", lengths(16), "mastercard"},
	{"62", "62", lengthRange(14, 19), "unionpay"},
	{"65", "65", lengthRange(16, 19), "discover"},
	{"60", "60", lengths(16), "rupay"},
	{"81", "81", lengthRange(14, 19), "unionpay"},
	{"82", "82", lengths(16), "rupay"},
	{"1", "1", lengths(15), "uatp"},
	{"4", "4", lengths(13, 16, 19), "visa"},
	{"50", "50", lengthRange(12, 19), "maestro"},
	{"56", "69", lengthRange(12, 19), "maestro"},
}

// cardKind returns the card network of a 12-19 digit number by its IIN range and length, or ""
// when no network issues numbers of that prefix and length.
func cardKind(d string) string {
	n := len(d)
	for _, r := range iinRanges {
		if len(r.lo) > n {
			continue
		}
		if p := d[:len(r.lo)]; p >= r.lo && p <= r.hi && r.lens.has(n) {
			return r.kind
		}
	}
	return ""
}
