// Command guardctl runs NeuroNetes' built-in guardrail detectors on text from standard input,
// with no gateway and no network:
//
//	guardctl analyze [--entities=EMAIL_ADDRESS,CREDIT_CARD] [--min-score=0.5] < text
//	    PII and secrets as Presidio's /analyze answers them: a JSON array of
//	    {"entity_type", "start", "end", "score"} with code-point offsets, highest score first.
//	guardctl jailbreak [--threshold=0.5] < text
//	    the jailbreak / prompt-injection score and the rules that matched, as JSON; exit status 3
//	    when the score reaches the threshold.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/neuronetes/neuronetes/gateway/guard"
	"github.com/neuronetes/neuronetes/gateway/guard/jailbreak"
)

// exitDetected is the exit status of `jailbreak` when the text scores at or above the threshold.
const exitDetected = 3

func main() {
	code, err := run(os.Args[1:], os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "guardctl:", err)
	}
	os.Exit(code)
}

func run(args []string, in io.Reader, out io.Writer) (int, error) {
	if len(args) == 0 {
		return 2, errors.New("usage: guardctl analyze|jailbreak [flags] < text")
	}
	switch args[0] {
	case "analyze":
		return analyze(args[1:], in, out)
	case "jailbreak":
		return scoreJailbreak(args[1:], in, out)
	}
	return 2, fmt.Errorf("unknown command %q (analyze, jailbreak)", args[0])
}

func analyze(args []string, in io.Reader, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("analyze", flag.ContinueOnError)
	entities := fs.String("entities", "", "comma-separated entity types (default all)")
	minScore := fs.Float64("min-score", 0, "drop findings scored below this, 0 to 1")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *minScore < 0 || *minScore > 1 {
		return 2, fmt.Errorf("--min-score: %g is outside [0, 1]", *minScore)
	}
	text, err := io.ReadAll(in)
	if err != nil {
		return 1, fmt.Errorf("read stdin: %w", err)
	}
	req := guard.AnalyzeRequest{Text: string(text), Language: "en", ScoreThreshold: *minScore}
	if *entities != "" {
		req.Entities = strings.Split(*entities, ",")
	}
	if req.Text == "" {
		return printJSON(out, []guard.AnalyzeResult{})
	}
	res, err := guard.Analyze(req)
	if err != nil {
		return 2, fmt.Errorf("--entities: %w", err)
	}
	return printJSON(out, res)
}

func scoreJailbreak(args []string, in io.Reader, out io.Writer) (int, error) {
	fs := flag.NewFlagSet("jailbreak", flag.ContinueOnError)
	th := fs.Float64("threshold", jailbreak.DefaultThreshold, "detection threshold, 0 to 1")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	text, err := io.ReadAll(in)
	if err != nil {
		return 1, fmt.Errorf("read stdin: %w", err)
	}
	r := jailbreak.Score(string(text))
	rules := []string{}
	for _, m := range r.Matches {
		rules = append(rules, m.Rule)
	}
	res := struct {
		Score    float64  `json:"score"`
		Detected bool     `json:"detected"`
		Rules    []string `json:"rules"`
	}{r.Score, r.Score >= *th, rules}
	if code, err := printJSON(out, res); err != nil {
		return code, err
	}
	if res.Detected {
		return exitDetected, nil
	}
	return 0, nil
}

func printJSON(out io.Writer, v any) (int, error) {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return 1, err
	}
	return 0, nil
}
