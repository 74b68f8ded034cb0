package helm_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/neuronetes/neuronetes/internal/kafkaconn"
)

// TestKafkaURLSchema: the chart's kafkaURL values (autoscaler.kafkaURL and
// dispatcher.defaults.kafkaURL) admit the URL forms internal/kafkaconn parses (the plain list,
// kafka://, kafkas:// with optional SASL) and refuse what it refuses; runs without helm.
func TestKafkaURLSchema(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir(t), "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties struct {
			Autoscaler struct {
				Properties struct {
					KafkaURL struct{ Pattern string } `json:"kafkaURL"`
				}
			}
			Dispatcher struct {
				Properties struct {
					Defaults struct {
						Properties struct {
							KafkaURL struct{ Pattern string } `json:"kafkaURL"`
						}
					}
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	patterns := map[string]string{
		"autoscaler.kafkaURL":          schema.Properties.Autoscaler.Properties.KafkaURL.Pattern,
		"dispatcher.defaults.kafkaURL": schema.Properties.Dispatcher.Properties.Defaults.Properties.KafkaURL.Pattern,
	}
	for _, tc := range []struct {
		url string
		ok  bool
	}{
		{"kafka-0.kafka:9092", true},
		{"kafka-0.kafka:9092,kafka-1.kafka:9092", true},
		{"kafka://kafka-0.kafka:9092,kafka-1.kafka:9092", true},
		{"kafkas://kafka-0.kafka:9093", true},
		{"kafkas://svc:p%40ss@kafka-0.kafka:9093,kafka-1.kafka:9093", true},
		{"kafkas://svc:pass@kafka-0.kafka:9093?sasl=scram-sha-512", true},
		{"kafka://svc:pass@kafka-0.kafka:9092", false},
		{"svc:pass@kafka-0.kafka:9092", false},
		{"kafkas://kafka-0.kafka:9093?sasl=plain", false},
		{"kafkas://svc:pass@kafka-0.kafka:9093?sasl=gssapi", false},
		{"kafka-0.kafka:9092,", false},
		{"kafka-0.kafka:ninety", false},
		{"nats://kafka-0.kafka:4222", false},
	} {
		_, perr := kafkaconn.ParseURL("--kafka-url", tc.url)
		if (perr == nil) != tc.ok {
			t.Fatalf("kafkaconn.ParseURL(%q) = %v, want ok %v", tc.url, perr, tc.ok)
		}
		for field, p := range patterns {
			re, err := regexp.Compile(p)
			if err != nil {
				t.Fatalf("%s pattern %q: %v", field, p, err)
			}
			if re.MatchString(tc.url) != tc.ok {
				t.Errorf("%s pattern on %q: match %v, want %v", field, tc.url, !tc.ok, tc.ok)
			}
		}
	}
}
