package toolproxy

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

var printer = message.NewPrinter(language.English)

// noLoader refuses every external reference: a schema in a ToolBinding may only refer to
// itself (no file or network access on its behalf).
type noLoader struct{}

func (noLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema reference %q is not allowed", url)
}

// Compile compiles a JSON Schema (draft 2020-12 unless it says otherwise).
func Compile(raw []byte) (*jsonschema.Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not JSON: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(noLoader{})
	const loc = "mem://tool/parameters.json"
	if err := c.AddResource(loc, doc); err != nil {
		return nil, err
	}
	s, err := c.Compile(loc)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Violation is one failed keyword: where in the arguments and which keyword. It carries no
// argument value, so it may be written to the audit.
type Violation struct {
	// Location is the JSON pointer of the failing value ("" for the root).
	Location string `json:"location"`
	// Keyword is the schema keyword path that failed (e.g. "required", "properties/n/minimum").
	Keyword string `json:"keyword"`
}

// Check validates arguments (a JSON document). It returns the message for the caller (which
// may quote the caller's own values) and the value-free violations for the audit.
func Check(s *jsonschema.Schema, arguments []byte) (string, []Violation, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(arguments))
	if err != nil {
		return "", []Violation{{Keyword: "json"}}, fmt.Errorf("arguments are not JSON: %w", err)
	}
	err = s.Validate(v)
	if err == nil {
		return "", nil, nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return "", nil, err
	}
	var out []Violation
	var msgs []string
	leaves(ve, func(e *jsonschema.ValidationError) {
		loc := "/" + strings.Join(e.InstanceLocation, "/")
		kw := strings.Join(e.ErrorKind.KeywordPath(), "/")
		out = append(out, Violation{Location: loc, Keyword: kw})
		msgs = append(msgs, fmt.Sprintf("at %s: %s", loc, e.ErrorKind.LocalizedString(printer)))
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Location+out[i].Keyword < out[j].Location+out[j].Keyword })
	sort.Strings(msgs)
	return strings.Join(msgs, "; "), out, nil
}

func leaves(e *jsonschema.ValidationError, f func(*jsonschema.ValidationError)) {
	if len(e.Causes) == 0 {
		f(e)
		return
	}
	for _, c := range e.Causes {
		leaves(c, f)
	}
}
