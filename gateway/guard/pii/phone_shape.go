package pii

// The shape rules below accept phone numbers by their printed form alone: an E.164 number with an
// assigned country code, a NANP number with plausible area code and exchange, a trunk-0 national
// number in groups. They find numbers libphonenumber does not know to be assigned (a new NANP
// area code, a number of a region outside the configured ones) and carry on when a scan's
// validation budget is spent.

// shapePhone returns the score and kind of a window by the shape rules, or ok false.
func shapePhone(w window) (score float64, kind string, ok bool) {
	n := len(w.digits)
	switch {
	case w.plus:
		if n < 8 || n > 15 || !countryCode(w.digits) || w.paren {
			return 0, "", false
		}
		return 0.6, "e164", true
	case intl00(w):
		intl := w.digits[2:]
		if len(intl) < 8 || len(intl) > 15 || !countryCode(intl) {
			return 0, "", false
		}
		return 0.5, "e164", true
	case nanp(w):
		if len(w.lens) == 1 {
			return 0.3, "nanp", true
		}
		return 0.6, "nanp", true
	case trunkNational(w):
		return 0.5, "national", true
	}
	return 0, "", false
}

// intl00 reports whether the window starts with the international prefix 00 as its own group
// or the start of a group of at most five digits ("0044 20 ...", "00 44 20 ...").
func intl00(w window) bool {
	return len(w.digits) > 2 && w.digits[:2] == "00" && len(w.lens) > 1 && w.lens[0] <= 5
}

// sameSepsAny reports whether every separator is one of allowed (they may differ).
func (w window) sameSepsAny(allowed ...string) bool {
	for _, s := range w.seps {
		ok := false
		for _, a := range allowed {
			ok = ok || s == a
		}
		if !ok {
			return false
		}
	}
	return true
}

func nanp(w window) bool {
	d, l := w.digits, w.lens
	switch {
	case len(l) == 1 && l[0] == 10:
	case len(l) == 3 && l[0] == 3 && l[1] == 3 && l[2] == 4:
	case len(l) == 4 && l[0] == 1 && d[0] == '1' && l[1] == 3 && l[2] == 3 && l[3] == 4:
		d = d[1:]
	default:
		return false
	}
	if len(l) == 3 && !w.paren && (w.seps[0] != w.seps[1]) {
		return false // "415-555.2671" mixes separators: not a printed phone number
	}
	if w.paren && (len(l) != 3 || w.seps[0] != ") " && w.seps[0] != ")") {
		return false
	}
	if w.before == '-' || w.after == '-' || w.before == '.' || w.after == '.' {
		return false
	}
	return d[0] >= '2' && d[3] >= '2' && !(d[1] == '1' && d[2] == '1') && !allSame(d)
}

func trunkNational(w window) bool {
	n := len(w.digits)
	if n < 10 || n > 11 || len(w.lens) < 2 || w.digits[0] != '0' || w.digits[1] == '0' || w.paren {
		return false
	}
	if w.before == '.' || w.after == '.' || w.before == '-' || w.after == '-' {
		return false
	}
	for _, l := range w.lens {
		if l < 2 {
			return false
		}
	}
	return w.sameSeps(" ") || w.sameSeps("-") || w.sameSeps(".")
}

// countryCode reports whether digits start with an ITU-T E.164 country code in use.
func countryCode(d string) bool {
	if d[0] == '1' || d[0] == '7' {
		return true
	}
	if cc2[d[:2]] {
		return true
	}
	if len(d) < 3 {
		return false
	}
	return cc3[d[:3]]
}

var cc2 = set("20", "27", "30", "31", "32", "33", "34", "36", "39", "40", "41", "43", "44", "45", "46",
	"47", "48", "49", "51", "52", "53", "54", "55", "56", "57", "58", "60", "61", "62", "63", "64", "65",
	"66", "81", "82", "84", "86", "90", "91", "92", "93", "94", "95", "98")

var cc3 = set(
	"211", "212", "213", "216", "218", "220", "221", "222", "223", "224", "225", "226", "227", "228",
	"229", "230", "231", "232", "233", "234", "235", "236", "237", "238", "239", "240", "241", "242",
	"243", "244", "245", "246", "247", "248", "249", "250", "251", "252", "253", "254", "255", "256",
	"257", "258", "260", "261", "262", "263", "264", "265", "266", "267", "268", "269", "290", "291",
	"297", "298", "299", "350", "351", "352", "353", "354", "355", "356", "357", "358", "359", "370",
	"371", "372", "373", "374", "375", "376", "377", "378", "379", "380", "381", "382", "383", "385",
	"386", "387", "389", "420", "421", "423", "500", "501", "502", "503", "504", "505", "506", "507",
	"508", "509", "590", "591", "592", "593", "594", "595", "596", "597", "598", "599", "670", "672",
	"673", "674", "675", "676", "677", "678", "679", "680", "681", "682", "683", "685", "686", "687",
	"688", "689", "690", "691", "692", "800", "808", "850", "852", "853", "855", "856", "870", "878",
	"880", "881", "882", "883", "886", "888", "960", "961", "962", "963", "964", "965", "966", "967",
	"968", "970", "971", "972", "973", "974", "975", "976", "977", "979", "992", "993", "994", "995",
	"996", "998")

func set(xs ...string) map[string]bool {
	m := make(map[string]bool, len(xs))
	for _, x := range xs {
		m[x] = true
	}
	return m
}
