package toolproxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// MaxAnswerBytes bounds a tool's answer.
const MaxAnswerBytes = 16 << 20

// Invoker calls a tool.
type Invoker interface {
	Invoke(ctx context.Context, t *Tool, c Caller, idemKey string, args []byte) (Answer, error)
}

// Invokers dispatches on the tool type. Tool endpoints are user-chosen (ToolBinding
// spec.endpoint) and their answers go back to the caller, so every call dials through Egress.
type Invokers struct {
	// Egress decides which addresses tool endpoints may reach (nil: public addresses only).
	Egress *egress.Policy
	// HTTP client; it must dial through Egress. Default: NewHTTPClient(Egress). The tool's
	// timeout (the context) bounds each call.
	HTTP *http.Client

	once sync.Once
	grpc grpcConns
}

// Invoke implements Invoker.
func (iv *Invokers) Invoke(ctx context.Context, t *Tool, c Caller, idemKey string, args []byte) (Answer, error) {
	if t.Type == "grpc" {
		return iv.invokeGRPC(ctx, t, c, idemKey, args)
	}
	return iv.invokeHTTP(ctx, t, c, idemKey, args)
}

// maxToolWait caps how long a tool may take to answer's headers whatever its configured timeout.
const maxToolWait = 10 * time.Minute

// NewHTTPClient returns the client of HTTP tools: dials through p, follows no redirects (a
// tool's answer is returned to the caller, so a redirect could read any URL), and waits for
// the answer's headers at most maxToolWait; the tool's timeout bounds the rest.
func NewHTTPClient(p *egress.Policy) *http.Client {
	return p.Client(egress.ClientOptions{ResponseHeaderTimeout: maxToolWait})
}

// invokeHTTP sends the arguments as the JSON body; the tool's status and body come back.
func (iv *Invokers) invokeHTTP(ctx context.Context, t *Tool, c Caller, idemKey string, args []byte) (Answer, error) {
	req, err := http.NewRequestWithContext(ctx, t.Method, t.Endpoint, bytes.NewReader(args))
	if err != nil {
		return Answer{}, fmt.Errorf("tool request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Session != "" {
		req.Header.Set("X-Neuronetes-Session", c.Session)
	} else {
		req.Header.Set("X-Neuronetes-Pool", c.Pool)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	iv.once.Do(func() {
		if iv.HTTP == nil {
			iv.HTTP = NewHTTPClient(iv.Egress)
		}
	})
	resp, err := iv.HTTP.Do(req)
	if err != nil {
		return Answer{}, fmt.Errorf("tool %s: %w", t.Name, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxAnswerBytes+1))
	if err != nil {
		return Answer{}, fmt.Errorf("tool %s answer: %w", t.Name, err)
	}
	if len(b) > MaxAnswerBytes {
		return Answer{}, fmt.Errorf("tool %s answer over %d bytes", t.Name, MaxAnswerBytes)
	}
	return Answer{Status: resp.StatusCode, ContentType: resp.Header.Get("Content-Type"), Body: b}, nil
}

// resolveMethod finds "pkg.Service/Method" through the server's reflection service.
func resolveMethod(ctx context.Context, conn *grpc.ClientConn, method string) (protoreflect.MethodDescriptor, error) {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return nil, fmt.Errorf("method %q: want package.Service/Method", method)
	}
	st, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("server reflection: %w", err)
	}
	defer func() { _ = st.CloseSend() }()
	files := map[string]*descriptorpb.FileDescriptorProto{}
	ask := func(req *rpb.ServerReflectionRequest) error {
		if err := st.Send(req); err != nil {
			return err
		}
		resp, err := st.Recv()
		if err != nil {
			return err
		}
		if e := resp.GetErrorResponse(); e != nil {
			return fmt.Errorf("reflection: %s", e.GetErrorMessage())
		}
		for _, raw := range resp.GetFileDescriptorResponse().GetFileDescriptorProto() {
			fd := &descriptorpb.FileDescriptorProto{}
			if err := proto.Unmarshal(raw, fd); err != nil {
				return err
			}
			files[fd.GetName()] = fd
		}
		return nil
	}
	if err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: svc}}); err != nil {
		return nil, fmt.Errorf("service %s: %w", svc, err)
	}
	for missing := true; missing; {
		missing = false
		for _, fd := range files {
			for _, dep := range fd.GetDependency() {
				if _, ok := files[dep]; !ok {
					missing = true
					if err := ask(&rpb.ServerReflectionRequest{MessageRequest: &rpb.ServerReflectionRequest_FileByFilename{FileByFilename: dep}}); err != nil {
						return nil, fmt.Errorf("file %s: %w", dep, err)
					}
				}
			}
		}
	}
	set := &descriptorpb.FileDescriptorSet{}
	for _, fd := range files {
		set.File = append(set.File, fd)
	}
	reg, err := protodesc.NewFiles(set)
	if err != nil {
		return nil, fmt.Errorf("descriptors of %s: %w", svc, err)
	}
	d, err := reg.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", svc, err)
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return nil, fmt.Errorf("%s is not a service", svc)
	}
	md := sd.Methods().ByName(protoreflect.Name(name))
	if md == nil {
		return nil, fmt.Errorf("service %s has no method %s", svc, name)
	}
	if md.IsStreamingClient() || md.IsStreamingServer() {
		return nil, fmt.Errorf("method %s is streaming: only unary methods are tools", method)
	}
	return md, nil
}
