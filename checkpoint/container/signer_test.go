package container

import (
	"testing"

	"github.com/neuronetes/neuronetes/checkpoint/store"
	"github.com/neuronetes/neuronetes/checkpoint/store/storetest"
)

func testSigner(t testing.TB) *store.Signer { return storetest.Signer(t) }

func testKey(agent string) store.Key { return storetest.Key(agent) }
