package plugin

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/neuronetes/neuronetes/driver/model"
	"github.com/neuronetes/neuronetes/driver/nvml"
	"github.com/neuronetes/neuronetes/driver/state"
)

// DebugHandler serves the test and operations endpoints; cmd/driver serves it only on loopback
// and behind a bearer token (serving.RequireLoopback, serving.RequireBearer):
//
//	POST /debug/health?gpu=<gpu-N|UUID>&kind=xid|lost|recovered[&xid=N]  inject a health event; on
//	                                                                    mocks lost/recovered also
//	                                                                    make the GPU (not) answer probes
//	POST /debug/prepare-pause?duration=60s                              pause every prepare after its
//	                                                                    first MIG instance (0 clears)
//	GET  /debug/gpus     the device model (JSON)
//	GET  /debug/mig      MIG instances that exist on the hardware, by GPU UUID
//	GET  /debug/claims   the checkpointed claims
//	GET  /debug/pid      the driver's process id (with hostPID, the host's)
func (d *Driver) DebugHandler() http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, v any) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /debug/health", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		uuid := q.Get("gpu")
		for _, g := range d.State.GPUs() {
			if model.WholeGPUName(g.Index) == uuid {
				uuid = g.UUID
			}
		}
		ev := nvml.Event{UUID: uuid, Kind: nvml.EventKind(q.Get("kind"))}
		switch ev.Kind {
		case nvml.EventXID:
			x, err := strconv.ParseUint(q.Get("xid"), 10, 64)
			if err != nil {
				http.Error(w, fmt.Sprintf("xid: %v", err), http.StatusBadRequest)
				return
			}
			ev.XID = x
		case nvml.EventLost, nvml.EventRecovered:
			if d.opts.Backend.IsMock() {
				if err := d.opts.Backend.SetLost(uuid, ev.Kind == nvml.EventLost); err != nil {
					http.Error(w, err.Error(), http.StatusInternalServerError)
					return
				}
			}
		default:
			http.Error(w, "kind: want xid, lost or recovered", http.StatusBadRequest)
			return
		}
		if !d.opts.Backend.Inject(ev) {
			http.Error(w, "event queue full", http.StatusServiceUnavailable)
			return
		}
		writeJSON(w, ev)
	})
	mux.HandleFunc("POST /debug/prepare-pause", func(w http.ResponseWriter, r *http.Request) {
		dur, err := time.ParseDuration(r.URL.Query().Get("duration"))
		if err != nil {
			http.Error(w, fmt.Sprintf("duration: %v", err), http.StatusBadRequest)
			return
		}
		if dur <= 0 {
			d.State.SetHook(nil)
		} else {
			d.State.SetHook(state.Sleep(dur))
		}
		writeJSON(w, map[string]string{"pause": dur.String()})
	})
	mux.HandleFunc("GET /debug/gpus", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.State.GPUs()) })
	mux.HandleFunc("GET /debug/claims", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, d.State.Claims()) })
	mux.HandleFunc("GET /debug/pid", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, map[string]int{"pid": os.Getpid()}) })
	mux.HandleFunc("GET /debug/mig", func(w http.ResponseWriter, r *http.Request) {
		gpus, err := nvml.Inventory(r.Context(), d.opts.Backend)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		out := map[string][]model.MIGInstance{}
		for _, g := range gpus {
			out[g.UUID] = append([]model.MIGInstance{}, g.MIGInstances...)
		}
		writeJSON(w, out)
	})
	return mux
}
