package pii

import "strings"

// Scanning helpers shared by the recognizers.

func isDigit(c byte) bool { return c >= '0' && c <= '9' }
func isUpper(c byte) bool { return c >= 'A' && c <= 'Z' }
func isLower(c byte) bool { return c >= 'a' && c <= 'z' }
func isAlpha(c byte) bool { return isUpper(c) || isLower(c) }
func isAlnum(c byte) bool { return isAlpha(c) || isDigit(c) }

// isWord reports whether c continues a word: a letter, digit or underscore, or any byte of a
// multi-byte UTF-8 sequence (so "é1234" is not a word boundary).
func isWord(c byte) bool { return isAlnum(c) || c == '_' || c >= 0x80 }

// boundaryBefore reports whether text[i] starts a word (nothing word-like precedes it).
func boundaryBefore(text string, i int) bool { return i == 0 || !isWord(text[i-1]) }

// boundaryAfter reports whether a value ending at i (exclusive) ends a word.
func boundaryAfter(text string, i int) bool { return i >= len(text) || !isWord(text[i]) }

// contextWindow is how many bytes before a value are searched for context words.
const contextWindow = 40

// contextBoost is added to a score when a context word precedes the value (Presidio's context
// enhancer uses the same amount).
const contextBoost = 0.35

// hasContext reports whether any of words (lower case) occurs in the contextWindow bytes before
// start.
func hasContext(text string, start int, words []string) bool {
	lo := start - contextWindow
	if lo < 0 {
		lo = 0
	}
	win := strings.ToLower(text[lo:start])
	for _, w := range words {
		if strings.Contains(win, w) {
			return true
		}
	}
	return false
}

// boosted returns base, raised by contextBoost (capped at 1) when context words precede start.
func boosted(text string, start int, base float64, words []string) float64 {
	if hasContext(text, start, words) {
		base += contextBoost
		if base > 1 {
			base = 1
		}
	}
	return base
}
