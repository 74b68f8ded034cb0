package e2e

import "github.com/neuronetes/neuronetes/e2e/cluster"

// e2eEgressAllow is what the suite's host-process gateways and dispatchers may reach although it
// is loopback or private: the host's loopback (test webhooks, tools, issuers), and the local
// cluster's pod and Service ranges (in-cluster tools and analyzers). Production keeps the default
// (nothing admitted); the attack tests in attack_egress_test.go run without it.
var e2eEgressAllow = "127.0.0.0/8,::1," + cluster.NodeIP + "/32," + cluster.PodCIDR + "," + cluster.ServiceCIDR
