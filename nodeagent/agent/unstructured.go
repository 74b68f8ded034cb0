package agent

import (
	"encoding/json"
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// toUnstructured round-trips obj through JSON so typed values (metav1.Time, structs) become plain
// JSON values.
func toUnstructured(obj map[string]any) (*unstructured.Unstructured, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode apply object: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(b); err != nil {
		return nil, fmt.Errorf("decode apply object: %w", err)
	}
	return u, nil
}
