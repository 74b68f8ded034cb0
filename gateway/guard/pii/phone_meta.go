package pii

import (
	"regexp"
	"strings"
	"sync"

	"github.com/nyaruka/phonenumbers"
)

// nsnPatterns are libphonenumber's general national-number patterns (every number a region
// assigns matches its region's), anchored and compiled once on first use: by region and by
// country calling code. A candidate that matches none is dismissed without a parse.
var nsnPatterns struct {
	once     sync.Once
	byRegion map[string]*regexp.Regexp
	byCC     map[int][]*regexp.Regexp
}

func loadNSNPatterns() {
	nsnPatterns.byRegion = map[string]*regexp.Regexp{}
	nsnPatterns.byCC = map[int][]*regexp.Regexp{}
	coll, err := phonenumbers.MetadataCollection()
	if err != nil {
		return // no metadata: every candidate goes to the parser, which then fails too
	}
	for _, m := range coll.GetMetadata() {
		p := m.GetGeneralDesc().GetNationalNumberPattern()
		if p == "" {
			continue
		}
		re, err := regexp.Compile("^(?:" + p + ")$")
		if err != nil {
			continue
		}
		nsnPatterns.byRegion[m.GetId()] = re
		cc := int(m.GetCountryCode())
		nsnPatterns.byCC[cc] = append(nsnPatterns.byCC[cc], re)
	}
}

// nationalNumber returns the region's number of national digits d, its trunk prefix taken off
// where present, or nil when the digits match the region's pattern neither way.
func (r *phoneRegion) nationalNumber(d string) *phonenumbers.PhoneNumber {
	nsnPatterns.once.Do(loadNSNPatterns)
	re := nsnPatterns.byRegion[r.code]
	if re == nil {
		return nil
	}
	if r.ndd != "" && len(d) > len(r.ndd) && d[:len(r.ndd)] == r.ndd && re.MatchString(d[len(r.ndd):]) {
		return newNumber(r.cc, d[len(r.ndd):], d, phonenumbers.PhoneNumber_FROM_DEFAULT_COUNTRY)
	}
	if re.MatchString(d) {
		return newNumber(r.cc, d, d, phonenumbers.PhoneNumber_FROM_DEFAULT_COUNTRY)
	}
	return nil
}

// internationalNumber returns the number of digits d (after "+" or "00"): a country calling code
// and a national number that, with or without one leading 0 (a "(0)" trunk prefix), matches a
// pattern of one of the code's regions; nil when there is none.
func internationalNumber(d string) *phonenumbers.PhoneNumber {
	nsnPatterns.once.Do(loadNSNPatterns)
	for l := 1; l <= 3 && l < len(d); l++ {
		cc := atoi(d[:l])
		res, ok := nsnPatterns.byCC[cc]
		if !ok {
			continue
		}
		nsn := d[l:]
		for _, re := range res {
			if re.MatchString(nsn) {
				return newNumber(cc, nsn, "+"+d, phonenumbers.PhoneNumber_FROM_NUMBER_WITH_PLUS_SIGN)
			}
			if len(nsn) > 1 && nsn[0] == '0' && re.MatchString(nsn[1:]) {
				return newNumber(cc, nsn[1:], "+"+d, phonenumbers.PhoneNumber_FROM_NUMBER_WITH_PLUS_SIGN)
			}
		}
		return nil // calling codes are prefix-free: no longer one can match
	}
	return nil
}

// newNumber builds the number libphonenumber's Parse would: the national significant number nsn
// (digits, perhaps with Italian leading zeros) of calling code cc.
func newNumber(cc int, nsn, raw string, src phonenumbers.PhoneNumber_CountryCodeSource) *phonenumbers.PhoneNumber {
	cc32 := int32(cc)
	var nn uint64
	for i := 0; i < len(nsn); i++ {
		nn = nn*10 + uint64(nsn[i]-'0')
	}
	num := &phonenumbers.PhoneNumber{CountryCode: &cc32, NationalNumber: &nn, RawInput: &raw, CountryCodeSource: &src}
	if zeros := len(nsn) - len(strings.TrimLeft(nsn, "0")); zeros > 0 && nn != 0 {
		t, z := true, int32(zeros)
		num.ItalianLeadingZero, num.NumberOfLeadingZeros = &t, &z
	}
	return num
}
