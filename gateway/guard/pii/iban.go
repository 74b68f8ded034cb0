package pii

// ibanRec finds IBANs, compact ("DE89370400440532013000") or printed in groups of four
// ("DE89 3704 0044 0532 0130 00"): a registered country code, exactly that country's length and
// a mod-97 check of 1.
type ibanRec struct{}

func (ibanRec) entity() Entity { return IBAN }

var ibanContext = []string{"iban", "account", "bank", "transfer", "wire", "sepa"}

func (ibanRec) find(text string, out []Finding) []Finding {
	for i := 0; i+4 <= len(text); i++ {
		if !isUpper(text[i]) || !isUpper(text[i+1]) || !isDigit(text[i+2]) || !isDigit(text[i+3]) || !boundaryBefore(text, i) {
			continue
		}
		want, ok := ibanLengths[text[i:i+2]]
		if !ok {
			continue
		}
		buf := make([]byte, 0, want)
		j := i
		for j < len(text) && len(buf) < want {
			c := text[j]
			switch {
			case isUpper(c) || isDigit(c):
				buf = append(buf, c)
				j++
			case c == ' ' && len(buf)%4 == 0 && len(buf) > 0 && j+1 < len(text) && isAlnum(text[j+1]):
				j++
			default:
				j = len(text) + 1 // stop: too short
			}
		}
		if len(buf) != want || j > len(text) || !boundaryAfter(text, j) || !IBANValid(string(buf)) {
			continue
		}
		out = append(out, Finding{Entity: IBAN, Start: i, End: j, Score: 1, Kind: text[i : i+2]})
		i = j - 1
	}
	return out
}
