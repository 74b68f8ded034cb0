package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/google/nftables/xt"
	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	networkinglisters "k8s.io/client-go/listers/networking/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// The xt-queue dataplane sends packets to the enforcer's nfqueue with the
// xtables NFQUEUE target run through nft_compat, for kernels built without
// the native nftables queue expression (CONFIG_NFT_QUEUE) but with
// CONFIG_NFT_COMPAT and CONFIG_NETFILTER_XT_TARGET_NFQUEUE. The upstream
// controller still evaluates every queued packet and sets its verdict; its
// own nftables table cannot be created on such kernels, so its sync errors
// are expected there. The rules mirror the upstream ones:
//
//	table ip kube-network-policies-xt
//	  chain postrouting (filter, postrouting, srcnat - 5)
//	    udp dport 53 accept              DNS is not filtered
//	    meta skuid 0 accept              the host's root: kubelet probes, host daemons
//	    ct state established,related accept
//	    ip saddr @podips-v4 NFQUEUE      local pods a NetworkPolicy selects
//	    ip daddr @podips-v4 NFQUEUE
//
// Only IPv4 is handled: the local cluster is single-stack.
const (
	xtTable = "kube-network-policies-xt"
	xtSet   = "podips-v4"
	// nfqFlagBypass is NFQ_FLAG_BYPASS of xt_NFQ_info_v3: accept the
	// packet when no process reads the queue.
	nfqFlagBypass = 0x01
)

// nfqueueTarget is the xtables NFQUEUE target, revision 3, for queue num.
// Its info (struct xt_NFQ_info_v3: queuenum, queues_total, flags, in host
// byte order) is padded to the 8-byte xtables alignment.
func nfqueueTarget(num uint16, failOpen bool) *expr.Target {
	info := make(xt.Unknown, 8)
	binary.NativeEndian.PutUint16(info[0:], num)
	binary.NativeEndian.PutUint16(info[2:], 1)
	if failOpen {
		binary.NativeEndian.PutUint16(info[4:], nfqFlagBypass)
	}
	return &expr.Target{Name: "NFQUEUE", Rev: 3, Info: &info}
}

// xtRules are the chain's rules, in order.
func xtRules(set *nftables.Set, queue uint16, failOpen bool) [][]expr.Any {
	accept := func() *expr.Verdict { return &expr.Verdict{Kind: expr.VerdictAccept} }
	toQueue := func(offset uint32) []expr.Any {
		return []expr.Any{
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
			&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
			nfqueueTarget(queue, failOpen),
		}
	}
	return [][]expr.Any{
		{
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_UDP}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(53)},
			accept(),
		},
		{
			&expr.Meta{Key: expr.MetaKeySKUID, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, 0, 0, 0}},
			accept(),
		},
		{
			&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
			&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
				Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
				Xor:  []byte{0, 0, 0, 0}},
			&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
			accept(),
		},
		toQueue(12), // ip saddr
		toQueue(16), // ip daddr
	}
}

// xtQueue keeps the xt-queue table in step with the local pods that
// NetworkPolicies select.
type xtQueue struct {
	nodeName string
	queue    uint16
	failOpen bool
	pods     corelisters.PodLister
	policies networkinglisters.NetworkPolicyLister
	kick     chan struct{}
}

// newXTQueue registers event handlers that resync the table on every pod or
// NetworkPolicy change.
func newXTQueue(factory informers.SharedInformerFactory, nodeName string, queue int, failOpen bool) *xtQueue {
	q := &xtQueue{
		nodeName: nodeName, queue: uint16(queue), failOpen: failOpen,
		pods:     factory.Core().V1().Pods().Lister(),
		policies: factory.Networking().V1().NetworkPolicies().Lister(),
		kick:     make(chan struct{}, 1),
	}
	h := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { q.trigger() },
		UpdateFunc: func(any, any) { q.trigger() },
		DeleteFunc: func(any) { q.trigger() },
	}
	for _, inf := range []cache.SharedIndexInformer{
		factory.Core().V1().Pods().Informer(),
		factory.Networking().V1().NetworkPolicies().Informer(),
	} {
		_, _ = inf.AddEventHandler(h)
	}
	return q
}

func (q *xtQueue) trigger() {
	select {
	case q.kick <- struct{}{}:
	default:
	}
}

// run writes the table once the caches synced, rewrites it at most every
// 100 ms while events arrive (and every 30 s regardless), and deletes it
// when ctx ends.
func (q *xtQueue) run(ctx context.Context, synced ...cache.InformerSynced) error {
	logger := klog.FromContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("xt-queue: caches did not sync")
	}
	defer q.delete(logger)
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	var last []netip.Addr
	written := false
	for {
		ips, err := q.selectedPodIPs()
		if err != nil {
			logger.Error(err, "xt-queue: listing selected pods")
		} else if !written || !slices.Equal(ips, last) {
			if err := q.write(ips); err != nil {
				logger.Error(err, "xt-queue: writing nftables table", "table", "ip "+xtTable)
			} else {
				logger.V(1).Info("xt-queue: table written", "podIPs", len(ips))
				last, written = ips, true
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		case <-q.kick:
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// selectedPodIPs lists, sorted, the IPv4 addresses of this node's pods that
// at least one NetworkPolicy selects.
func (q *xtQueue) selectedPodIPs() ([]netip.Addr, error) {
	policies, err := q.policies.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	seen := map[netip.Addr]bool{}
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			continue
		}
		pods, err := q.pods.Pods(np.Namespace).List(sel)
		if err != nil {
			return nil, err
		}
		for _, pod := range pods {
			for _, a := range localPodIPv4s(pod, q.nodeName) {
				seen[a] = true
			}
		}
	}
	out := make([]netip.Addr, 0, len(seen))
	for a := range seen {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out, nil
}

// localPodIPv4s are the IPv4 addresses of a running, non-host-network pod
// on nodeName.
func localPodIPv4s(pod *v1.Pod, nodeName string) []netip.Addr {
	if pod.Spec.NodeName != nodeName || pod.Spec.HostNetwork || pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
		return nil
	}
	var out []netip.Addr
	for _, ip := range pod.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() {
			out = append(out, a)
		}
	}
	return out
}

// write replaces the table in one transaction (add + delete + add flushes
// it), so packets never see a half-written rule set.
func (q *xtQueue) write(ips []netip.Addr) error {
	c, err := nftables.New()
	if err != nil {
		return err
	}
	table := &nftables.Table{Name: xtTable, Family: nftables.TableFamilyIPv4}
	c.AddTable(table)
	c.DelTable(table)
	c.AddTable(table)
	set := &nftables.Set{Table: table, Name: xtSet, KeyType: nftables.TypeIPAddr}
	elems := make([]nftables.SetElement, 0, len(ips))
	for _, a := range ips {
		elems = append(elems, nftables.SetElement{Key: a.AsSlice()})
	}
	if err := c.AddSet(set, elems); err != nil {
		return err
	}
	chain := c.AddChain(&nftables.Chain{
		Name: "postrouting", Table: table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityNATSource - 5),
	})
	for _, r := range xtRules(set, q.queue, q.failOpen) {
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: r})
	}
	return c.Flush()
}

// delete removes the table; the enforcer leaves nothing behind.
func (q *xtQueue) delete(logger klog.Logger) {
	c, err := nftables.New()
	if err == nil {
		c.DelTable(&nftables.Table{Name: xtTable, Family: nftables.TableFamilyIPv4})
		err = c.Flush()
	}
	if err != nil {
		logger.Error(err, "xt-queue: deleting nftables table", "table", "ip "+xtTable)
	}
}
