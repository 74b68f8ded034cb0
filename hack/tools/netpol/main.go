// Command kube-network-policies is the NetworkPolicy enforcer of the local
// e2e cluster: the controller of sigs.k8s.io/kube-network-policies (the one
// kind runs), started as a host process with a kubeconfig instead of the
// in-cluster config its own command requires. It enforces
// networking.k8s.io/v1 NetworkPolicies on the node's pod traffic through an
// nftables table (inet kube-network-policies) and an nfqueue, or, with
// --dataplane=xt-queue, through its own table (ip kube-network-policies-xt,
// xtqueue.go) on kernels without the nftables queue expression; it removes
// its tables when it gets SIGINT or SIGTERM.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sys/unix"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/logs"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/kube-network-policies/pkg/networkpolicy"
)

func main() { os.Exit(run()) }

func run() int {
	var (
		kubeconfig, nodeName, metricsAddr, dataplane string
		queueID                                      int
		failOpen                                     bool
	)
	flag.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (required)")
	flag.StringVar(&nodeName, "hostname-override", "", "name of the Node this enforcer runs on (required)")
	flag.StringVar(&metricsAddr, "metrics-bind-address", "127.0.0.1:9080", "address of the /metrics endpoint")
	flag.IntVar(&queueID, "nfqueue-id", 100, "number of the nfqueue that receives new connections")
	flag.BoolVar(&failOpen, "fail-open", false, "accept packets while no enforcer reads the queue")
	flag.StringVar(&dataplane, "dataplane", "nftables", "how packets reach the queue: nftables (the upstream rules, native queue expression) or xt-queue (the xtables NFQUEUE target through nft_compat, for kernels without CONFIG_NFT_QUEUE)")
	c := logsapi.NewLoggingConfiguration()
	logsapi.AddGoFlags(c, flag.CommandLine)
	flag.Parse()
	logs.InitLogs()
	if err := logsapi.ValidateAndApply(c, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if kubeconfig == "" || nodeName == "" {
		fmt.Fprintln(os.Stderr, "--kubeconfig and --hostname-override are required")
		return 2
	}
	if dataplane != "nftables" && dataplane != "xt-queue" {
		fmt.Fprintf(os.Stderr, "--dataplane: %q is neither nftables nor xt-queue\n", dataplane)
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer cancel()
	logger := klog.FromContext(ctx)

	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		logger.Error(err, "loading kubeconfig", "path", kubeconfig)
		return 1
	}
	config.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
	config.ContentType = "application/vnd.kubernetes.protobuf"
	clientset, err := kubernetes.NewForConfig(config)
	if err != nil {
		logger.Error(err, "creating client")
		return 1
	}
	factory := informers.NewSharedInformerFactory(clientset, 0)

	http.Handle("/metrics", promhttp.Handler())
	go func() { utilruntime.HandleError(http.ListenAndServe(metricsAddr, nil)) }()

	ctrl, err := networkpolicy.NewController(clientset,
		factory.Networking().V1().NetworkPolicies(),
		factory.Core().V1().Namespaces(),
		factory.Core().V1().Pods(),
		nil, nil, nil, nil,
		networkpolicy.Config{
			FailOpen:            failOpen,
			QueueID:             queueID,
			NodeName:            nodeName,
			NetfilterBug1766Fix: true,
			// NRI stays on: v0.8.0 looks up an address that is no pod's in its NRI
			// plugin, which is nil when NRI is disabled (a crash on the first such
			// packet). Where the runtime serves no NRI socket the plugin's
			// connection fails once, is logged, and pods come from the apiserver.
			NRIdisabled: false,
		})
	if err != nil {
		logger.Error(err, "creating the network policy controller")
		return 1
	}
	go func() { utilruntime.HandleError(ctrl.Run(ctx)) }()
	xtDone := make(chan struct{})
	if dataplane == "xt-queue" {
		xq := newXTQueue(factory, nodeName, queueID, failOpen)
		go func() {
			defer close(xtDone)
			utilruntime.HandleError(xq.run(ctx,
				factory.Core().V1().Pods().Informer().HasSynced,
				factory.Networking().V1().NetworkPolicies().Informer().HasSynced))
		}()
	} else {
		close(xtDone)
	}
	factory.Start(ctx.Done())
	<-ctx.Done()
	// The controller removes its nftables table when its context ends, the
	// xt-queue dataplane its own.
	<-xtDone
	time.Sleep(5 * time.Second)
	return 0
}
