package pii

import (
	"regexp"
	"strings"
)

// secretRec finds API keys and tokens of common providers by their documented literal prefixes
// and shapes, in one pass over the text; a candidate's shape is checked by an anchored
// expression on a bounded slice.
type secretRec struct{}

func (secretRec) entity() Entity { return APIKey }

type secretPattern struct {
	kind   string
	prefix string
	re     *regexp.Regexp // anchored at the prefix
	maxLen int
}

func sp(kind, prefix, expr string, maxLen int) secretPattern {
	return secretPattern{kind: kind, prefix: prefix, re: regexp.MustCompile(`^(?:` + expr + `)`), maxLen: maxLen}
}

var secretPatterns = []secretPattern{
	sp("aws_access_key", "AKIA", `AKIA[0-9A-Z]{16}`, 20),
	sp("aws_access_key", "ASIA", `ASIA[0-9A-Z]{16}`, 20),
	sp("github_token", "ghp_", `ghp_[0-9A-Za-z]{36}`, 40),
	sp("github_token", "gho_", `gho_[0-9A-Za-z]{36}`, 40),
	sp("github_token", "ghu_", `ghu_[0-9A-Za-z]{36}`, 40),
	sp("github_token", "ghs_", `ghs_[0-9A-Za-z]{36}`, 40),
	sp("github_token", "ghr_", `ghr_[0-9A-Za-z]{36}`, 40),
	sp("github_pat", "github_pat_", `github_pat_[0-9A-Za-z_]{82}`, 93),
	sp("gitlab_token", "glpat-", `glpat-[0-9A-Za-z_-]{20,}`, 80),
	sp("slack_token", "xox", `xox[abposr]-[0-9A-Za-z-]{10,}`, 256),
	sp("slack_webhook", "https://hooks.slack.com/", `https://hooks\.slack\.com/services/T[0-9A-Z]{6,}/B[0-9A-Z]{6,}/[0-9A-Za-z]{20,}`, 160),
	sp("stripe_key", "sk_live_", `sk_live_[0-9A-Za-z]{24,}`, 128),
	sp("stripe_key", "sk_test_", `sk_test_[0-9A-Za-z]{24,}`, 128),
	sp("stripe_key", "rk_live_", `rk_live_[0-9A-Za-z]{24,}`, 128),
	sp("google_api_key", "AIza", `AIza[0-9A-Za-z_-]{35}`, 39),
	sp("anthropic_key", "sk-ant-", `sk-ant-(?:api|admin)[0-9]{2}-[0-9A-Za-z_-]{80,}`, 200),
	sp("openai_key", "sk-proj-", `sk-proj-[0-9A-Za-z_-]{40,}`, 256),
	sp("openai_key", "sk-svcacct-", `sk-svcacct-[0-9A-Za-z_-]{40,}`, 256),
	sp("openai_key", "sk-", `sk-[0-9A-Za-z]{20}T3BlbkFJ[0-9A-Za-z]{20}`, 51),
	sp("huggingface_token", "hf_", `hf_[A-Za-z]{34}`, 37),
	sp("npm_token", "npm_", `npm_[0-9A-Za-z]{36}`, 40),
	sp("sendgrid_key", "SG.", `SG\.[0-9A-Za-z_-]{22}\.[0-9A-Za-z_-]{43}`, 69),
	sp("jwt", "eyJ", `eyJ[0-9A-Za-z_-]{8,}\.eyJ[0-9A-Za-z_-]{8,}\.[0-9A-Za-z_-]{16,}`, 8192),
}

// keyLike reports whether c can continue a token (so a match must not stop inside a longer one).
func keyLike(c byte) bool { return isAlnum(c) || c == '_' || c == '-' }

// secretsByFirst indexes secretPatterns by the first byte of their prefix.
var secretsByFirst = func() [256][]int {
	var idx [256][]int
	for i, p := range secretPatterns {
		idx[p.prefix[0]] = append(idx[p.prefix[0]], i)
	}
	return idx
}()

// find scans text once: at every token start whose byte begins some provider prefix, the
// prefixes are compared and a matching one's shape is checked on a bounded slice.
func (secretRec) find(text string, out []Finding) []Finding {
	for i := 0; i < len(text); i++ {
		cands := secretsByFirst[text[i]]
		if len(cands) == 0 || i > 0 && keyLike(text[i-1]) {
			continue
		}
		for _, k := range cands {
			p := secretPatterns[k]
			if !strings.HasPrefix(text[i:], p.prefix) {
				continue
			}
			hi := min(len(text), i+p.maxLen+1)
			loc := p.re.FindStringIndex(text[i:hi])
			if loc == nil {
				continue
			}
			end := i + loc[1]
			if end < len(text) && keyLike(text[end]) && p.kind != "slack_webhook" && p.kind != "jwt" {
				continue // part of a longer identifier of another shape
			}
			out = append(out, Finding{Entity: APIKey, Start: i, End: end, Score: 1, Kind: p.kind})
			i = end - 1
			break
		}
	}
	return out
}

// privateKeyRec finds PEM, OpenSSH and PGP private-key blocks from the BEGIN line to the matching
// END line. A block whose END line is missing runs to the end of the text: an unterminated key
// is still a key.
type privateKeyRec struct{}

func (privateKeyRec) entity() Entity { return PrivateKey }

// privateKeyMarker ends the label of every PEM and OpenSSH private-key header.
const privateKeyMarker = "PRIVATE KEY"

func (privateKeyRec) find(text string, out []Finding) []Finding {
	for off := 0; ; {
		k := strings.Index(text[off:], "-----BEGIN ")
		if k < 0 {
			return out
		}
		i := off + k
		eol := strings.Index(text[i+11:], "-----")
		if eol < 0 || eol > 40 {
			off = i + 11
			continue
		}
		label := text[i+11 : i+11+eol]
		if !strings.HasSuffix(label, privateKeyMarker) && label != "PGP PRIVATE KEY BLOCK" {
			off = i + 11
			continue
		}
		endMarker := "-----END " + label + "-----"
		e := strings.Index(text[i:], endMarker)
		end := len(text)
		if e >= 0 {
			end = i + e + len(endMarker)
		}
		out = append(out, Finding{Entity: PrivateKey, Start: i, End: end, Score: 1, Kind: strings.ToLower(strings.ReplaceAll(label, " ", "_"))})
		off = end
	}
}
