package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	"sigs.k8s.io/cluster-api/util/conditions"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	infrav1 "github.com/capct/cluster-api-provider-container/api/v1alpha1"
	"github.com/capct/cluster-api-provider-container/internal/lifecycle"
	"github.com/capct/cluster-api-provider-container/internal/naming"
)

// kubelets play the kubelet of every machine: once a ContainerMachine is
// Bootstrapped (its bootstrap data ran, so a real kubelet would start), its
// Node registers, named as the container, tainted uninitialized as a
// kubelet with an external cloud provider does, and reports Ready. They
// read ContainerMachines from the manager's own informer, so they add no
// cache of their own to the process's memory, and write through a client
// of their own (user agent bench-driver), so their requests are not
// counted as the manager's.
type kubelets struct {
	client  client.Client
	queue   chan *infrav1.ContainerMachine
	mu      sync.Mutex
	started map[string]bool
}

func startKubelets(ctx context.Context, informers cache.Cache, c client.Client, workers int) error {
	k := &kubelets{client: c, queue: make(chan *infrav1.ContainerMachine, 1<<16), started: map[string]bool{}}
	inf, err := informers.GetInformer(ctx, &infrav1.ContainerMachine{})
	if err != nil {
		return fmt.Errorf("failed to get the ContainerMachine informer: %w", err)
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.seen(obj) },
		UpdateFunc: func(_, obj any) { k.seen(obj) },
	}); err != nil {
		return fmt.Errorf("failed to watch ContainerMachines for the simulated kubelets: %w", err)
	}
	for range workers {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case cm := <-k.queue:
					if err := k.register(ctx, cm); err != nil && ctx.Err() == nil {
						fmt.Printf("simulated kubelet of %s/%s: %v\n", cm.Namespace, cm.Name, err)
					}
				}
			}
		}()
	}
	return nil
}

func (k *kubelets) seen(obj any) {
	cm, ok := obj.(*infrav1.ContainerMachine)
	if !ok || !conditions.IsTrue(cm, infrav1.BootstrappedCondition) {
		return
	}
	key := cm.Namespace + "/" + cm.Name
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.started[key] {
		return
	}
	k.started[key] = true
	k.queue <- cm
}

func (k *kubelets) register(ctx context.Context, cm *infrav1.ContainerMachine) error {
	clusterName := cm.Labels[clusterv1.ClusterNameLabel]
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   naming.ContainerName(cm.Namespace, clusterName, cm.Name),
			Labels: map[string]string{clusterLabel: clusterLabelValue(cm.Namespace, clusterName), corev1.LabelHostname: cm.Name},
		},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: lifecycle.UninitializedTaint, Effect: corev1.TaintEffectNoSchedule}}},
	}
	if err := k.client.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("failed to register Node %s: %w", node.Name, err)
	}
	// CAPCT patches the Node meanwhile (providerID, pod CIDRs, taint).
	if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := k.client.Get(ctx, client.ObjectKeyFromObject(node), node); err != nil {
			return err
		}
		now := metav1.NewTime(time.Now())
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: now, LastTransitionTime: now}}
		return k.client.Status().Update(ctx, node)
	}); err != nil {
		return fmt.Errorf("failed to report Node %s Ready: %w", node.Name, err)
	}
	return nil
}
