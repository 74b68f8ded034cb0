package agentpool

import (
	"context"
	"fmt"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	nnv1 "github.com/neuronetes/neuronetes/api/v1alpha1"
)

// ClassConditionDeviceClass is the AgentClass condition that says whether the DeviceClass of its
// GPU request exists (the DRA driver installs it).
const ClassConditionDeviceClass = "DeviceClassAvailable"

// ClassReconciler keeps an AgentClass's ResourceClaimTemplate and reports it in the status.
type ClassReconciler struct {
	// Client reads from the cache and writes to the apiserver.
	Client client.Client
	// Scheme knows the API types.
	Scheme *runtime.Scheme
}

// Reconcile ensures the claim template of one AgentClass.
func (r *ClassReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	logger := klog.FromContext(ctx).WithValues("agentclass", req.NamespacedName)
	var class nnv1.AgentClass
	if err := r.Client.Get(ctx, req.NamespacedName, &class); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	orig := class.DeepCopy()
	if class.Spec.GPU == nil {
		class.Status.ResourceClaimTemplateName = ""
		meta.RemoveStatusCondition(&class.Status.Conditions, ClassConditionDeviceClass)
	} else {
		name, exists, err := ensureClaimTemplate(ctx, r.Client, r.Scheme, &class)
		if err != nil {
			return ctrl.Result{}, err
		}
		class.Status.ResourceClaimTemplateName = name
		cond := metav1.Condition{Type: ClassConditionDeviceClass, Status: metav1.ConditionTrue, Reason: "Found",
			Message: "DeviceClass " + deviceClassFor(class.Spec.GPU) + " exists", ObservedGeneration: class.Generation}
		if !exists {
			cond.Status, cond.Reason = metav1.ConditionFalse, "NotFound"
			cond.Message = "DeviceClass " + deviceClassFor(class.Spec.GPU) + " does not exist yet; pods stay Pending until the DRA driver installs it"
		}
		meta.SetStatusCondition(&class.Status.Conditions, cond)
	}
	if err := r.Client.Status().Patch(ctx, &class, client.MergeFrom(orig)); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("patch agentclass status: %w", err)
	}
	logger.V(4).Info("reconciled", "claimTemplate", class.Status.ResourceClaimTemplateName)
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler; DeviceClass changes re-check every class with a GPU.
func (r *ClassReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Client == nil {
		r.Client = mgr.GetClient()
	}
	if r.Scheme == nil {
		r.Scheme = mgr.GetScheme()
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&nnv1.AgentClass{}).
		Owns(&resourcev1.ResourceClaimTemplate{}).
		Watches(&resourcev1.DeviceClass{}, handler.EnqueueRequestsFromMapFunc(r.gpuClasses)).
		Named("agentclass").
		Complete(r)
}

func (r *ClassReconciler) gpuClasses(ctx context.Context, _ client.Object) []reconcile.Request {
	var l nnv1.AgentClassList
	if err := r.Client.List(ctx, &l); err != nil && !apierrors.IsNotFound(err) {
		return nil
	}
	var out []reconcile.Request
	for _, c := range l.Items {
		if c.Spec.GPU != nil {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&c)})
		}
	}
	return out
}
