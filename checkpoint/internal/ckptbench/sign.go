package main

import (
	"crypto/rand"

	"github.com/neuronetes/neuronetes/checkpoint/store"
)

// benchKey is where the benchmark stores its checkpoints.
var benchKey = store.Key{Namespace: "bench", Agent: "bench"}

// benchSigner signs with a random key: each benchmark's store lives only as long as the run.
func benchSigner() *store.Signer {
	key := make([]byte, store.MinKeyBytes)
	_, _ = rand.Read(key)
	s, err := store.NewSigner(key)
	if err != nil {
		panic(err)
	}
	return s
}
