package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"os"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/neuronetes/neuronetes/internal/modelsrcapi"
	"github.com/neuronetes/neuronetes/nodeagent/agent"
)

// sourceFlags are the flags of the controller's Model source credentials endpoint.
type sourceFlags struct {
	url, tokenFile, caFile, caWebhook string
}

func (f *sourceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "model-source-url", "", "https://host:port of the controller's Model source credentials endpoint (the agent reads no Secret). Empty: Models with spec.source.secretRef fail")
	fs.StringVar(&f.tokenFile, "model-source-token-file", "/var/run/secrets/neuronetes/model-sources/token", "this pod's projected ServiceAccount token with audience "+modelsrcapi.Audience)
	fs.StringVar(&f.caFile, "model-source-ca-file", "", "PEM CA bundle of the endpoint's certificate")
	fs.StringVar(&f.caWebhook, "model-source-ca-webhook", "", "trust the caBundle of this MutatingWebhookConfiguration (the controller serves the endpoint with its webhook certificate); instead of --model-source-ca-file")
}

// credentials returns the client of the endpoint, or nil without --model-source-url.
func (f *sourceFlags) credentials(reader client.Reader) (agent.CredentialSource, error) {
	if f.url == "" {
		return nil, nil
	}
	if u, err := url.Parse(f.url); err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, fmt.Errorf("--model-source-url %q: want https://host:port", f.url)
	}
	c := &modelsrcapi.Client{URL: f.url, TokenFile: f.tokenFile}
	switch {
	case (f.caFile == "") == (f.caWebhook == ""):
		return nil, errors.New("--model-source-url needs one of --model-source-ca-file and --model-source-ca-webhook")
	case f.caFile != "":
		path := f.caFile
		c.CA = func(context.Context) ([]byte, error) { return os.ReadFile(path) }
	default:
		name := f.caWebhook
		c.CA = func(ctx context.Context) ([]byte, error) { return webhookCABundle(ctx, reader, name) }
	}
	return c, nil
}

// webhookCABundle reads the caBundle of the MutatingWebhookConfiguration name (its first webhook).
func webhookCABundle(ctx context.Context, reader client.Reader, name string) ([]byte, error) {
	var cfg admissionregistrationv1.MutatingWebhookConfiguration
	if err := reader.Get(ctx, types.NamespacedName{Name: name}, &cfg); err != nil {
		return nil, fmt.Errorf("get MutatingWebhookConfiguration %s (--model-source-ca-webhook): %w", name, err)
	}
	for _, w := range cfg.Webhooks {
		if len(w.ClientConfig.CABundle) > 0 {
			return w.ClientConfig.CABundle, nil
		}
	}
	return nil, fmt.Errorf("MutatingWebhookConfiguration %s has no caBundle yet", name)
}
