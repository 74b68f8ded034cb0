package main

import (
	"encoding/json"
	"strings"
)

// curlLines returns the shell lines the summary prints for a person to paste in the repository
// root: the first reads the demo tenant's API key from its Secret with kubectl, the second
// streams one more turn of conversation conv through the gateway at url (-N: no buffering, so
// the chunks show as they arrive; -i: the X-Neuronetes-Pod and X-Neuronetes-Pin headers).
func curlLines(kubectl, kubeconfig, url, conv, text string) []string {
	body, _ := json.Marshal(map[string]any{"model": demoModel, "stream": true, "max_tokens": 16,
		"stream_options": map[string]bool{"include_usage": true},
		"messages":       []map[string]string{{"role": "user", "content": text}}})
	get := []string{shellQuote(kubectl), "--kubeconfig", shellQuote(kubeconfig), "-n", demoNamespace,
		"get", "secret", demoKeySecret, "-o", shellQuote("jsonpath={.data." + demoKeyField + "}")}
	curl := []string{"curl", "-sSN", "-i", shellQuote(url + "/v1/chat/completions"),
		"-H", `"Authorization: Bearer $KEY"`, "-H", shellQuote("Content-Type: application/json"),
		"-H", shellQuote("X-Conversation-Id: " + conv), "-d", shellQuote(string(body))}
	return []string{
		"KEY=$(" + strings.Join(get, " ") + " | base64 -d)",
		strings.Join(curl, " "),
	}
}

// shellQuote quotes s for a POSIX shell: as is when it has only characters no shell treats
// specially, else in single quotes (a quote inside becomes '\”).
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("-_./:=@%+,", r):
		default:
			safe = false
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
