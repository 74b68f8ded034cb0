// Command demo-agent is NeuroNetes' stand-in for a model server in demos, e2e tests and
// benchmarks: an OpenAI-compatible server over a model of an inference engine with continuous
// batching, a prefix KV cache of fixed-size token blocks with LRU eviction, prefill time for the
// prompt tokens not in the cache, timed decode, and vLLM's metric names (see docs/demo-agent.md).
// It reads a weights file at start (to show warm versus cold loading) and keeps session memory in
// the NeuroNetes sidecar when NEURONETES_SIDECAR_URL is set.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/neuronetes/neuronetes/demoagent/engine"
	"github.com/neuronetes/neuronetes/demoagent/kvpub"
	"github.com/neuronetes/neuronetes/demoagent/server"
	"github.com/neuronetes/neuronetes/gateway/kvevents"
	"github.com/neuronetes/neuronetes/internal/serving"
)

func main() {
	if err := run(); err != nil {
		klog.Background().Error(err, "demo-agent failed")
		klog.FlushAndExit(klog.ExitFlushTimeout, 1)
	}
}

// loadWeights reads the whole file and returns bytes read and the time it took.
func loadWeights(path string) (int64, time.Duration, error) {
	start := time.Now()
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("open weights: %w", err)
	}
	defer f.Close()
	n, err := io.CopyBuffer(io.Discard, f, make([]byte, 4<<20))
	if err != nil {
		return n, 0, fmt.Errorf("read weights %s: %w", path, err)
	}
	return n, time.Since(start), nil
}

// options are the command line.
type options struct {
	listen, weights string
	readyDelay      time.Duration
	drain           time.Duration
	kvTokens        int
	failMode        string
	kvEvents        string
	kvTopic         string
	stateBytes      int64
	stateSeed       uint64
	eng             engine.Config
	srv             server.Config
}

func parseFlags(args []string) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("demo-agent", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", ":8000", "HTTP listen address")
	fs.StringVar(&o.srv.Model, "model", "demo-model", "model name reported by the API and metrics")
	fs.StringVar(&o.srv.AgentClass, "agent-class", os.Getenv("NEURONETES_AGENT_CLASS"), "agent class label of the neuronetes_* metrics")
	fs.IntVar(&o.eng.Slots, "max-running", 4, "sequences in the batch at once (vLLM's max_num_seqs); more wait")
	fs.Float64Var(&o.eng.DecodeRate, "token-rate", 50, "generated tokens per second of each sequence")
	fs.Float64Var(&o.eng.PrefillRate, "prefill-rate", 20000, "prompt tokens per second of prefill, for the tokens not in the prefix cache; prefills run one at a time")
	fs.DurationVar(&o.eng.FirstTokenOverhead, "ttft-base", 50*time.Millisecond, "time from the end of prefill to the first token")
	fs.IntVar(&o.eng.BlockSize, "block-size", 16, "tokens per KV cache block")
	fs.IntVar(&o.kvTokens, "kv-cache-tokens", 262144, "KV cache capacity in tokens (rounded down to whole blocks)")
	fs.BoolVar(&o.eng.PrefixCaching, "prefix-caching", true, "keep computed blocks for prompts that share a prefix")
	fs.IntVar(&o.srv.DefaultMaxTokens, "default-max-tokens", 16, "output tokens of a request that sets no max_tokens")
	fs.Int64Var(&o.srv.MaxBodyBytes, "max-body-bytes", 32<<20, "largest request body accepted")
	fs.Float64Var(&o.srv.FailRate, "fail-rate", 0, "share of requests (0-1) failed on purpose, evenly spread")
	fs.StringVar(&o.failMode, "fail-mode", string(server.FailStatus), "how failed requests fail: status (HTTP 500 before any token), midstream (error event after half the tokens), disconnect (connection dropped after half the tokens)")
	fs.BoolVar(&o.srv.ToolCalls, "tool-calls", false, "with tool_choice auto (or none given), answer chat requests that list tools with a call of the chosen tool (vLLM's --enable-auto-tool-choice); tool_choice required or a named function always gets a call")
	fs.IntVar(&o.srv.EmbeddingDim, "embedding-dim", server.DefaultEmbeddingDim, "length of /v1/embeddings vectors")
	fs.StringVar(&o.weights, "weights", os.Getenv("NEURONETES_WEIGHTS_PATH"), "weights file read fully at start (optional)")
	fs.DurationVar(&o.readyDelay, "ready-delay", 0, "extra simulated load time before /readyz succeeds")
	fs.StringVar(&o.srv.SidecarURL, "sidecar-url", os.Getenv("NEURONETES_SIDECAR_URL"), "sidecar base URL; empty disables session memory")
	fs.DurationVar(&o.drain, "drain-timeout", 25*time.Second, "time open streams get to finish after SIGTERM")
	fs.StringVar(&o.kvEvents, "kv-events-endpoint", "", "ZeroMQ endpoint the KV-cache events are published on, as vLLM's --kv-events-config endpoint (e.g. tcp://*:5557); empty publishes none")
	fs.StringVar(&o.kvTopic, "kv-events-topic", "", "topic frame of the KV-cache events (vLLM's default is empty)")
	fs.Int64Var(&o.stateBytes, "state-bytes", 0, "bytes of in-memory state allocated and filled at start (all pages written); GET /state hashes it, POST /state?seed=N refills it; other requests wait for the fill (0: none)")
	fs.Uint64Var(&o.stateSeed, "state-seed", 1, "seed of the state filled at start (--state-bytes)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		bad  bool
		flag string
		val  any
	}{
		{o.eng.Slots < 1, "--max-running", o.eng.Slots},
		{!(o.eng.DecodeRate > 0), "--token-rate", o.eng.DecodeRate},
		{!(o.eng.PrefillRate > 0), "--prefill-rate", o.eng.PrefillRate},
		{o.eng.FirstTokenOverhead < 0, "--ttft-base", o.eng.FirstTokenOverhead},
		{o.eng.BlockSize < 1, "--block-size", o.eng.BlockSize},
		{o.eng.BlockSize >= 1 && o.kvTokens < o.eng.BlockSize, "--kv-cache-tokens (at least one block)", o.kvTokens},
		{o.srv.DefaultMaxTokens < 1, "--default-max-tokens", o.srv.DefaultMaxTokens},
		{o.srv.MaxBodyBytes < 1, "--max-body-bytes", o.srv.MaxBodyBytes},
		{!(o.srv.FailRate >= 0 && o.srv.FailRate <= 1), "--fail-rate (0-1)", o.srv.FailRate},
		{o.srv.EmbeddingDim < 1, "--embedding-dim", o.srv.EmbeddingDim},
		{o.stateBytes < 0, "--state-bytes", o.stateBytes},
	} {
		if c.bad {
			return nil, fmt.Errorf("%s: bad value %v", c.flag, c.val)
		}
	}
	o.eng.Blocks = o.kvTokens / o.eng.BlockSize
	mode, err := server.ParseFailMode(o.failMode)
	if err != nil {
		return nil, fmt.Errorf("--fail-mode: %w", err)
	}
	o.srv.FailMode = mode
	if err := o.eng.Validate(); err != nil {
		return nil, fmt.Errorf("engine flags: %w", err)
	}
	if err := o.srv.Validate(); err != nil {
		return nil, fmt.Errorf("server flags: %w", err)
	}
	return o, nil
}

func run() error {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		return nil
	}
	if err != nil {
		return err
	}
	clk := clock.RealClock{}
	eng, err := engine.New(o.eng, clk)
	if err != nil {
		return err
	}
	s, err := server.New(o.srv, eng, clk)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	logger := klog.FromContext(ctx).WithName("demo-agent")
	if o.kvEvents != "" {
		pub, err := kvevents.Listen(ctx, o.kvEvents, o.kvTopic)
		if err != nil {
			return err
		}
		defer pub.Close()
		rec := kvpub.NewRecorder(o.eng.BlockSize)
		eng.SetCacheObserver(rec)
		go rec.Run(ctx, pub, clk)
		logger.Info("Publishing KV-cache events", "endpoint", o.kvEvents, "addr", pub.Addr().String())
	}
	go eng.Run(ctx)

	h := s.Handler()
	var st *state
	if o.stateBytes > 0 {
		st = newState(o.stateBytes)
		h = st.handler(h)
	}
	srv := serving.Stream(0).Server(o.listen, h)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	logger.Info("Listening", "addr", o.listen, "model", o.srv.Model, "slots", o.eng.Slots, "kvBlocks", o.eng.Blocks,
		"blockSize", o.eng.BlockSize, "sidecar", o.srv.SidecarURL)

	go func() {
		if st != nil {
			start := time.Now()
			st.fill(o.stateSeed)
			logger.Info("State filled", "bytes", o.stateBytes, "took", time.Since(start))
		}
		if o.weights != "" {
			n, d, err := loadWeights(o.weights)
			if err != nil {
				errc <- err
				return
			}
			s.ObserveWeightsLoad(d)
			logger.Info("Weights loaded", "bytes", n, "took", d, "MiBPerSecond", float64(n)/(1<<20)/max(d.Seconds(), 1e-9))
		}
		time.Sleep(o.readyDelay)
		s.SetReady(true)
		logger.Info("Ready")
	}()

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case got := <-sig:
		logger.Info("Draining open requests", "signal", got.String(), "timeout", o.drain)
		s.SetReady(false)
		dctx, cancel := context.WithTimeout(context.Background(), o.drain)
		defer cancel()
		return srv.Shutdown(dctx)
	}
}
