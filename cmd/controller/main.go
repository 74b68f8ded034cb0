// Command controller is the NeuroNetes cluster controller: the AgentPool reconciler with warm
// pools, the autoscaling loop with its scale webhook, and the sidecar-injection webhook. It runs as a leader-elected Deployment, or as a host
// process against a kubeconfig (e2e, make run).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
	"github.com/neuronetes/neuronetes/controller/agentnetpol"
	"github.com/neuronetes/neuronetes/controller/agentpool"
	"github.com/neuronetes/neuronetes/controller/agentsession"
	"github.com/neuronetes/neuronetes/controller/modelcreds"
	nnwebhook "github.com/neuronetes/neuronetes/controller/webhook"
	"github.com/neuronetes/neuronetes/internal/serving"
	"github.com/neuronetes/neuronetes/internal/serving/ctrlserving"
)

// options are the command-line flags.
type options struct {
	metricsAddr, healthAddr   string
	leaderElect               bool
	leaderElectionNamespace   string
	namespace                 string
	prices                    priceOptions
	interruption              interruptionOptions
	webhookEnabled            bool
	webhookHost               string
	webhookPort               int
	webhookCertDir            string
	webhookURL                string
	webhookService            string
	webhookConfigName         string
	webhookConfigExternal     bool
	webhookCertSecret         string
	sidecarImage, sidecarPull string
	sidecarRedis, sidecarArgs string
	sidecarKeysSecret         string
	sidecarRedisSecret        string
	sidecarProbe              string
	weightsWaitImage          string
	sidecarResources          sidecarResourceFlags
	sidecarGoMaxProcs         int
	autoscaler                autoscalerOptions
	rollout                   rolloutOptions
	agentNetPolFile           string
	agentNetPolName           string
	agentSessions             bool
	sessionRestoreHostImage   string
	sessionNetPolFile         string
	modelSourceNamespace      string
	modelSourceResync         time.Duration
	modelSourceAddr           string
	modelSourceNodeAgent      string
	modelSourceCertDir        string
	redisUsers                redisUserOptions
	// certs is the shared-Secret keeper once setupWebhook made it.
	certs *nnwebhook.CertSecret
}

func parseFlags() *options {
	o := &options{}
	flag.StringVar(&o.metricsAddr, "metrics-addr", "127.0.0.1:9402", "address of the Prometheus /metrics endpoint (\"0\" disables)")
	flag.StringVar(&o.healthAddr, "health-addr", "127.0.0.1:9403", "address of /healthz and /readyz")
	flag.BoolVar(&o.leaderElect, "leader-elect", false, "enable leader election (on for the in-cluster Deployment)")
	flag.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader-election Lease (default: in-cluster namespace)")
	flag.StringVar(&o.namespace, "namespace", "", "watch only this namespace and scope the webhook to it (default: all)")
	flag.BoolVar(&o.webhookEnabled, "webhook", true, "serve the sidecar-injection webhook")
	flag.StringVar(&o.webhookHost, "webhook-host", "", "webhook listen host (default all interfaces)")
	flag.IntVar(&o.webhookPort, "webhook-port", 9443, "webhook listen port")
	flag.StringVar(&o.webhookCertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "neuronetes-webhook-certs"),
		"directory with tls.crt, tls.key and ca.crt; generated when missing in --webhook-url mode")
	flag.StringVar(&o.webhookURL, "webhook-url", "", "register the webhook by URL, e.g. https://127.0.0.1:9443 (host process mode; certs are generated)")
	flag.StringVar(&o.webhookService, "webhook-service", "", "register the webhook by Service namespace/name (in-cluster mode; caBundle from ca.crt)")
	flag.StringVar(&o.webhookConfigName, "webhook-config-name", nnwebhook.ConfigName, "name of the MutatingWebhookConfiguration to keep")
	flag.BoolVar(&o.webhookConfigExternal, "webhook-config-external", false, "the MutatingWebhookConfiguration is created and owned by the installer (the Helm chart): only set its caBundle, never create it or rewrite its selectors")
	flag.StringVar(&o.webhookCertSecret, "webhook-cert-secret", "", "namespace/name of a Secret holding the CA and serving pair shared by every replica: created when missing, renewed by the leader before expiry, copied into --webhook-cert-dir and reloaded (empty: each process generates its own pair into --webhook-cert-dir)")
	flag.StringVar(&o.sidecarImage, "sidecar-image", nnwebhook.DefaultSidecarImage, "image of the injected sidecar")
	flag.StringVar(&o.sidecarPull, "sidecar-pull-policy", string(corev1.PullNever), "imagePullPolicy of the injected sidecar")
	flag.StringVar(&o.sidecarRedis, "sidecar-redis-addr", "10.88.0.1:6379", "default NEURONETES_REDIS_ADDR of injected sidecars")
	flag.StringVar(&o.sidecarRedisSecret, "sidecar-redis-secret", "neuronetes-sidecar-redis", "Secret of the pod's namespace whose keys username and password injected sidecars use as their Redis user (optional references unless --sidecar-redis-users: without it, Redis' default user; empty disables)")
	flag.StringVar(&o.sidecarKeysSecret, "sidecar-keys-secret", "neuronetes-sidecar-keys", "Secret mounted at /etc/neuronetes/keys when the AgentClass names none (optional volume; empty disables)")
	flag.StringVar(&o.sidecarArgs, "sidecar-args", "", "space-separated extra arguments of the injected sidecar")
	flag.StringVar(&o.weightsWaitImage, "weights-wait-image", "", "node agent image whose wait-weights init container the webhook adds to agent pods that mount a node agent ready directory (agent.WeightsVolume), so they start once their weights are ready; empty: none")
	flag.StringVar(&o.sidecarProbe, "sidecar-probe-command", strings.Join(nnwebhook.DefaultProbeCommand, " "),
		"space-separated exec startup/readiness probe of the injected native sidecar; the agent containers start once it passes (empty: no probe)")
	o.sidecarResources.addFlags(flag.CommandLine)
	flag.IntVar(&o.sidecarGoMaxProcs, "sidecar-gomaxprocs", nnwebhook.DefaultGoMaxProcs, "GOMAXPROCS of injected sidecars (0: Go's default, the CPU limit or else the node's CPUs)")
	flag.StringVar(&o.agentNetPolFile, "agent-network-policy-file", "", "NetworkPolicySpec (YAML) kept in every namespace with AgentPools under --agent-network-policy-name (empty: none)")
	flag.StringVar(&o.agentNetPolName, "agent-network-policy-name", "neuronetes-agents", "name of the agent NetworkPolicy in each namespace")
	flag.BoolVar(&o.agentSessions, "agent-sessions", false, "run the AgentSession controller (controller/agentsession; needs the AgentSession and AgentCheckpoint CRDs and the node agents' checkpointing; docs/sessions.md)")
	flag.StringVar(&o.sessionNetPolFile, "session-network-policy-file", "", "NetworkPolicySpec (YAML) of each AgentSession's own NetworkPolicy session-<name>, its podSelector narrowed to that session's pods; empty: none")
	flag.StringVar(&o.sessionRestoreHostImage, "session-restore-host-image", "registry.k8s.io/pause:3.10", "image of the host container of a resume pod (an AgentSession's, or the replacement of an interrupted pool pod that has a checkpoint of its own), into which the node agent restores the checkpointed agent (a pause image)")
	flag.StringVar(&o.modelSourceNamespace, "model-source-namespace", "", "namespace where the credentials of each Model's spec.source.secretRef (read in the Model's namespace) are copied for --model-source-addr (controller/modelcreds; empty: none)")
	flag.StringVar(&o.modelSourceAddr, "model-source-addr", "", "address of the TLS endpoint where node agents fetch a Model's source credentials with their projected token, answered only when their node uses the Model (controller/modelcreds Server; empty: off)")
	flag.StringVar(&o.modelSourceNodeAgent, "model-source-node-agent", "", "the node agents' ServiceAccount, namespace/name: the only caller --model-source-addr answers")
	flag.StringVar(&o.modelSourceCertDir, "model-source-cert-dir", "", "directory with the endpoint's tls.crt and tls.key, reloaded when they change (default: --webhook-cert-dir)")
	flag.DurationVar(&o.modelSourceResync, "model-source-resync", modelcreds.DefaultResync, "how often a Model's source Secret is read again (tenant Secrets are not watched)")
	o.autoscaler.addFlags(flag.CommandLine)
	o.prices.addFlags(flag.CommandLine)
	o.interruption.addFlags(flag.CommandLine)
	o.rollout.addFlags(flag.CommandLine)
	o.redisUsers.addFlags(flag.CommandLine)
	klog.InitFlags(nil)
	flag.Parse()
	return o
}

func main() {
	o := parseFlags()
	ctrl.SetLogger(klog.NewKlogr())
	if err := run(ctrl.SetupSignalHandler(), o); err != nil {
		klog.ErrorS(err, "controller failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}

func run(ctx context.Context, o *options) error {
	logger := klog.FromContext(ctx)
	logger.Info("controller initializing", "namespace", o.namespace, "metrics", o.metricsAddr, "webhookURL", o.webhookURL)
	scaleTokens, err := o.autoscaler.validate()
	if err != nil {
		return err
	}
	sidecarRes, err := o.sidecarResources.requirements()
	if err != nil {
		return err
	}
	if err := o.redisUsers.validate(o); err != nil {
		return err
	}
	if err := validateModelSources(o); err != nil {
		return err
	}
	if err := apiKeys.validate(); err != nil {
		return err
	}
	if o.sidecarGoMaxProcs < 0 {
		return fmt.Errorf("--sidecar-gomaxprocs: %d is negative (0 keeps Go's default)", o.sidecarGoMaxProcs)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	if err := nnv1.AddToScheme(scheme); err != nil {
		return fmt.Errorf("scheme: %w", err)
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}

	cacheOpts, err := managerCacheOptions(o)
	if err != nil {
		return err
	}
	mgrOpts := ctrl.Options{
		Scheme:                  scheme,
		Cache:                   cacheOpts,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr, FilterProvider: ctrlserving.MetricsFilter},
		HealthProbeBindAddress:  o.healthAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        "controller.neuronetes.io",
		LeaderElectionNamespace: o.leaderElectionNamespace,
	}
	if o.webhookEnabled {
		mgrOpts.WebhookServer = webhook.NewServer(webhook.Options{Host: o.webhookHost, Port: o.webhookPort, CertDir: o.webhookCertDir})
	}
	mgr, err := ctrl.NewManager(cfg, mgrOpts)
	if err != nil {
		return fmt.Errorf("manager: %w", err)
	}

	prices, err := o.prices.kubePrices(mgr)
	if err != nil {
		return err
	}
	taints, err := o.interruption.keys()
	if err != nil {
		return err
	}
	rec := &agentpool.Reconciler{Metrics: agentpool.NewMetrics(crmetrics.Registry), Prices: prices, InterruptionTaints: taints,
		RestoreHostImage: o.sessionRestoreHostImage, Sessions: o.agentSessions}
	// Warm-pool restores need the AgentCheckpoint CRD; without it the pools work as before.
	if _, err := mgr.GetRESTMapper().RESTMapping(schema.GroupKind{Group: nnv1.GroupVersion.Group, Kind: "AgentCheckpoint"}, nnv1.GroupVersion.Version); err == nil {
		rec.Checkpoints = true
	} else {
		logger.Info("AgentCheckpoint CRD not served; warm-pool restores disabled", "err", err)
	}
	if err := rec.SetupWithManager(mgr); err != nil {
		return fmt.Errorf("agentpool controller: %w", err)
	}
	if err := (&agentpool.ClassReconciler{}).SetupWithManager(mgr); err != nil {
		return fmt.Errorf("agentclass controller: %w", err)
	}
	if o.agentSessions {
		sr := &agentsession.Reconciler{Metrics: agentsession.NewMetrics(crmetrics.Registry), RestoreHostImage: o.sessionRestoreHostImage,
			InterruptionTaints: taints}
		if o.sessionNetPolFile != "" {
			spec, err := agentnetpol.LoadSpecFlag("--session-network-policy-file", o.sessionNetPolFile)
			if err != nil {
				return err
			}
			sr.NetworkPolicy = &spec
		}
		if err := sr.SetupWithManager(mgr, o.namespace); err != nil {
			return fmt.Errorf("agentsession controller: %w", err)
		}
	}
	if o.agentNetPolFile != "" {
		spec, err := agentnetpol.LoadSpec(o.agentNetPolFile)
		if err != nil {
			return err
		}
		if err := (&agentnetpol.Reconciler{Name: o.agentNetPolName, Spec: spec}).SetupWithManager(mgr); err != nil {
			return fmt.Errorf("agent NetworkPolicy controller: %w", err)
		}
	}
	if err := setupModelSources(mgr, o); err != nil {
		return err
	}
	if err := apiKeys.setup(ctx, mgr); err != nil {
		return err
	}
	if o.autoscaler.enabled {
		if o.autoscaler.certDir == "" {
			o.autoscaler.certDir = o.webhookCertDir
		}
		if err := setupAutoscaler(mgr, &o.autoscaler, scaleTokens, o.namespace, prices); err != nil {
			return err
		}
	}
	if err := setupRollouts(mgr, &o.rollout, o.namespace); err != nil {
		return err
	}

	if o.redisUsers.manage {
		if err := setupRedisUsers(ctx, mgr, o); err != nil {
			return err
		}
	}
	if o.webhookEnabled {
		if err := setupWebhook(ctx, mgr, o, &sidecarRes); err != nil {
			return err
		}
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	logger.Info("starting controller", "namespace", o.namespace, "metrics", o.metricsAddr, "webhook", o.webhookEnabled,
		"autoscaler", o.autoscaler.enabled, "scaleWebhook", o.autoscaler.enabled && o.autoscaler.addr != "")
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager: %w", err)
	}
	return nil
}

// managerCacheOptions is what the manager caches: only pool pods and the controller's own agent
// NetworkPolicies (and, with --model-source-namespace, the Model source copies there), and with
// --namespace only that namespace: the chart's Roles for controller.watchNamespace grant no more.
func managerCacheOptions(o *options) (cache.Options, error) {
	poolPods, err := labels.NewRequirement(nnv1.PoolLabel, selection.Exists, nil)
	if err != nil {
		return cache.Options{}, fmt.Errorf("pod selector: %w", err)
	}
	managedPolicies := labels.SelectorFromSet(labels.Set{nnv1.ManagedByLabel: nnv1.ManagedByController})
	opts := cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.Pod{}:                 {Label: labels.NewSelector().Add(*poolPods)},
		&networkingv1.NetworkPolicy{}: {Label: managedPolicies},
	}}
	if o.modelSourceNamespace != "" {
		// Only the Model source copies are cached; tenant Secrets are read one at a time.
		opts.ByObject[&corev1.Secret{}] = modelcreds.CacheByObject(o.modelSourceNamespace)
	}
	if o.namespace != "" {
		opts.DefaultNamespaces = map[string]cache.Config{o.namespace: {}}
	}
	return opts, nil
}

// setupWebhook registers the injector and, with --webhook-url or --webhook-service, keeps the
// MutatingWebhookConfiguration.
func setupWebhook(ctx context.Context, mgr ctrl.Manager, o *options, res *corev1.ResourceRequirements) error {
	inj := &nnwebhook.Injector{
		Client:      mgr.GetAPIReader(),
		Decoder:     admission.NewDecoder(mgr.GetScheme()),
		Image:       o.sidecarImage,
		PullPolicy:  corev1.PullPolicy(o.sidecarPull),
		RedisAddr:   o.sidecarRedis,
		ExtraArgs:   strings.Fields(o.sidecarArgs),
		KeysSecret:  o.sidecarKeysSecret,
		RedisSecret: o.sidecarRedisSecret,
		// Managed Secrets are required: no sidecar starts as Redis' default user.
		RedisSecretRequired: o.redisUsers.manage,
		Resources:           res,
		GoMaxProcs:          o.sidecarGoMaxProcs,
		ProbeCommand:        strings.Fields(o.sidecarProbe),
		WeightsWaitImage:    o.weightsWaitImage,
	}
	mgr.GetWebhookServer().Register(nnwebhook.Path, serving.Admin().Bound(&webhook.Admission{Handler: inj}))

	var target nnwebhook.Target
	var ca []byte
	var err error
	switch {
	case o.webhookURL != "":
		u, perr := url.Parse(o.webhookURL)
		if perr != nil || u.Scheme != "https" {
			return fmt.Errorf("--webhook-url %q: want https://host:port", o.webhookURL)
		}
		host := u.Hostname()
		hosts := []string{host}
		if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
			hosts = append(hosts, "127.0.0.1")
		}
		if ca, err = ensureCerts(ctx, mgr, o, hosts); err != nil {
			return err
		}
		target.URL = strings.TrimRight(o.webhookURL, "/")
	case o.webhookService != "":
		ns, name, ok := strings.Cut(o.webhookService, "/")
		if !ok {
			return fmt.Errorf("--webhook-service %q: want namespace/name", o.webhookService)
		}
		target.ServiceNamespace, target.ServiceName = ns, name
		svcHost := name + "." + ns + ".svc"
		if ca, err = ensureCerts(ctx, mgr, o, []string{svcHost, name + "." + ns + ".svc.cluster.local"}); err != nil {
			return err
		}
	default:
		return nil // registration is done elsewhere (e.g. by a chart with its own CA)
	}
	c, err := client.New(mgr.GetConfig(), client.Options{Scheme: mgr.GetScheme()})
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	target.ConfigName, target.Namespace, target.External = o.webhookConfigName, o.namespace, o.webhookConfigExternal
	if err := nnwebhook.Register(ctx, c, target, ca); err != nil {
		return err
	}
	if o.webhookCertSecret != "" {
		if err := addCertRotation(mgr, c, o, target, ca); err != nil {
			return err
		}
	}
	klog.FromContext(ctx).Info("webhook registered", "config", o.webhookConfigName, "url", target.URL, "service", o.webhookService)
	return nil
}
