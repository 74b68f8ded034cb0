// Package jailbreak scores texts for jailbreak and prompt-injection attempts with weighted
// heuristics: instruction overrides, persona and "developer mode" framings, removal of rules and
// filters, system-prompt extraction, false authority, dual-response formats and encoded payloads.
//
// Each rule has a weight in (0, 1); a text's score combines the rules it matches as a noisy OR,
// 1 - prod(1 - w), so independent signals add up and no single weak one reaches a typical
// threshold of 0.5. Rules are checked only when their cheap keyword occurs in the lower-cased,
// whitespace-folded text. The labelled evaluation set and its sources are in testdata/.
package jailbreak

import (
	"regexp"
	"sort"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Rule is one weighted signal.
type Rule struct {
	// Name is the signal's name (a span type in findings).
	Name string
	// Keywords: every match of the expression contains one of them; the expression is tried
	// only on a window around each occurrence, so its cost does not grow with the whole text.
	Keywords []string
	// Weight is the rule's contribution in (0, 1).
	Weight float64
	re     *regexp.Regexp
}

func rule(name, keywords string, w float64, expr string) Rule {
	return Rule{Name: name, Keywords: strings.Split(keywords, "|"), Weight: w, re: regexp.MustCompile(expr)}
}

// Window bounds around a keyword occurrence: matches are at most this long on either side.
const (
	windowBefore = 160
	windowAfter  = 200
	// maxWindows bounds the windows tried per keyword, so repeated common words cannot make a
	// long text expensive. 64 windows of 360 bytes cover 23 KiB of text around occurrences.
	maxWindows = 64
)

// find returns the first match of ru in f. The expression runs once over each merged window
// around keyword occurrences (found through ix), never over the same byte twice.
func (ru Rule) find(f string, ix wordIndex) []int {
	var wins [][2]int
	for _, kw := range ru.Keywords {
		for _, i := range ix.occurrences(f, kw) {
			wins = append(wins, [2]int{max(0, i-windowBefore), min(len(f), i+len(kw)+windowAfter)})
		}
	}
	if len(wins) == 0 {
		return nil
	}
	sort.Slice(wins, func(a, b int) bool { return wins[a][0] < wins[b][0] })
	cur := wins[0]
	for _, w := range append(wins[1:], [2]int{len(f) + 1, len(f) + 1}) {
		if w[0] <= cur[1] {
			cur[1] = max(cur[1], w[1])
			continue
		}
		if loc := ru.re.FindStringIndex(f[cur[0]:cur[1]]); loc != nil {
			return []int{cur[0] + loc[0], cur[0] + loc[1]}
		}
		cur = w
	}
	return nil
}

// wordIndex maps each word of a folded text (runs of letters, digits, underscores, hyphens and apostrophes) to its
// start offsets, so keywords are found by lookups instead of substring scans.
type wordIndex map[string][]int

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '\'' || c >= 'A' && c <= 'Z'
}

func buildIndex(f string) wordIndex {
	ix := wordIndex{}
	for i := 0; i < len(f); {
		if !isWordByte(f[i]) {
			i++
			continue
		}
		j := i
		for j < len(f) && isWordByte(f[j]) {
			j++
		}
		w := f[i:j]
		if len(ix[w]) < maxWindows {
			ix[w] = append(ix[w], i)
		}
		i = j
	}
	return ix
}

// occurrences returns where kw occurs in f as whole words (stems: as word prefixes; a plural
// "s" is allowed), at most maxWindows of them. Keywords that start with punctuation are searched
// as substrings.
func (ix wordIndex) occurrences(f, kw string) []int {
	if !isLetter(kw[0]) && !(kw[0] >= '0' && kw[0] <= '9') {
		var out []int
		for off := 0; len(out) < maxWindows; {
			k := strings.Index(f[off:], kw)
			if k < 0 {
				break
			}
			out = append(out, off+k)
			off += k + 1
		}
		return out
	}
	first, rest, multi := strings.Cut(kw, " ")
	var cand []int
	switch {
	case stems[kw]:
		for w, ps := range ix {
			if strings.HasPrefix(w, kw) {
				cand = append(cand, ps...)
			}
		}
	default:
		cand = append(append(cand, ix[first]...), ix[first+"s"]...)
	}
	if !multi {
		return cand
	}
	out := cand[:0]
	for _, p := range cand {
		if strings.HasPrefix(f[p+len(first):], " "+rest) && wordEnd(f, p+len(kw), kw) {
			out = append(out, p)
		}
	}
	return out
}

// wordStart reports whether the keyword at i starts a word (keywords starting with a
// non-letter are taken as they are).
func wordStart(f string, i int, kw string) bool {
	return i == 0 || !isLetter(kw[0]) || !isLetter(f[i-1])
}

// wordEnd reports whether a whole-word keyword ends at i. Keywords that are stems (they end in
// a letter and are listed as stems) may continue: "jailbr", "ethic", "polic", "restriction".
func wordEnd(f string, i int, kw string) bool {
	if i >= len(f) || !isLetter(kw[len(kw)-1]) || stems[kw] {
		return true
	}
	c := f[i]
	return !isLetter(c) || c == 's' && (i+1 >= len(f) || !isLetter(f[i+1]))
}

var stems = map[string]bool{"jailbr": true, "ethic": true, "polic": true, "censor": true, "restriction": true,
	"limitation": true, "filter": true, "apolog": true, "disclaimer": true, "warning": true, "moral": true,
	"im_start": true, "instruction": true, "safeguard": true, "guardrail": true, "hypothetical": true}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

// Match is one rule a text matched.
type Match struct {
	Rule       string
	Weight     float64
	Start, End int // byte offsets into the folded text (lower-cased, whitespace folded)
}

// Result is a text's score and the rules behind it.
type Result struct {
	Score   float64
	Matches []Match
}

// Score scores text.
func Score(text string) Result {
	f := Fold(text)
	ix := buildIndex(f)
	var r Result
	best := map[string]float64{}
	for _, ru := range Rules {
		loc := ru.find(f, ix)
		if loc == nil {
			continue
		}
		r.Matches = append(r.Matches, Match{Rule: ru.Name, Weight: ru.Weight, Start: loc[0], End: loc[1]})
		if ru.Weight > best[ru.Name] {
			best[ru.Name] = ru.Weight
		}
	}
	// One contribution per signal name: the same signal phrased twice is not new evidence.
	keep := 1.0
	for _, w := range best {
		keep *= 1 - w
	}
	r.Score = 1 - keep
	return r
}

// Fold lower-cases text, drops zero-width and control characters, maps common look-alike
// letters to ASCII and folds runs of white space into one space (newlines are kept once). ASCII
// bytes take a table-free fast path; only other runes are decoded.
func Fold(text string) string {
	b := make([]byte, 0, len(text))
	space := false
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			i++
			switch {
			case c == '\n':
				if !space {
					b = append(b, '\n')
				}
				space = true
			case c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f':
				if !space {
					b = append(b, ' ')
				}
				space = true
			case c < 0x20 || c == 0x7f:
			default:
				if c >= 'A' && c <= 'Z' {
					c += 'a' - 'A'
				}
				b = append(b, c)
				space = false
			}
			continue
		}
		r, n := utf8.DecodeRuneInString(text[i:])
		i += n
		switch {
		case unicode.IsSpace(r):
			if !space {
				b = append(b, ' ')
			}
			space = true
			continue
		case r == '\u200b' || r == '\u200c' || r == '\u200d' || r == '\u2060' || r == '\ufeff' || unicode.IsControl(r):
			continue
		}
		space = false
		if a, ok := confusables[r]; ok {
			r = a
		}
		if r == '’' || r == '‘' {
			r = '\''
		}
		b = utf8.AppendRune(b, unicode.ToLower(r))
	}
	return string(b)
}

// confusables maps Cyrillic and Greek letters that look like Latin ones.
var confusables = map[rune]rune{
	'а': 'a', 'е': 'e', 'о': 'o', 'р': 'p', 'с': 'c', 'у': 'y', 'х': 'x', 'і': 'i', 'ј': 'j',
	'А': 'a', 'Е': 'e', 'О': 'o', 'Р': 'p', 'С': 'c', 'Т': 't', 'Х': 'x', 'І': 'i', 'Н': 'h',
	'ο': 'o', 'α': 'a', 'ι': 'i', 'ν': 'v', 'Ο': 'o', 'Α': 'a',
}

// DefaultThreshold is the score at and above which a text counts as an attempt.
const DefaultThreshold = 0.5
