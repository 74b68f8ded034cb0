package main

import (
	"flag"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/neuronetes/neuronetes/controller/agentpool"
)

// interruptionOptions name the admin's own interruption taints (spotStrategy.onInterruption).
type interruptionOptions struct {
	taints string
}

func (o *interruptionOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.taints, "interruption-taint", "", "comma-separated node taint keys that announce a spot interruption (pools migrate, sessions suspend and resume elsewhere), besides "+strings.Join(agentpool.DefaultInterruptionTaints, ", "))
}

// keys parses --interruption-taint; each key must be a valid taint key.
func (o *interruptionOptions) keys() ([]string, error) {
	var out []string
	for _, k := range strings.Split(o.taints, ",") {
		k = strings.TrimSpace(k)
		if k == "" {
			continue
		}
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return nil, fmt.Errorf("--interruption-taint %q: %s", k, strings.Join(errs, "; "))
		}
		out = append(out, k)
	}
	return out, nil
}
