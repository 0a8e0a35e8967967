package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// The child's stdout may arrive in any pieces: the ready line, the report
// and stray lines are told apart by line, and stray lines go to the log.
func TestChildOutput(t *testing.T) {
	var logs bytes.Buffer
	o := newChildOutput(&logs)
	if _, err := o.report(); err == nil {
		t.Fatal("a report before the child wrote one")
	}
	rep := childReport{PeakRSSMiB: 61.5, Requests: []requestRecord{{requestKey: requestKey{Agent: capiAgent, Verb: "list", Resource: "machines"}, Count: 2, Bytes: 10}},
		Reconciles: map[string]int{"machine": 5}}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	stream := readyLine + "\nsomething printed\n" + reportPrefix + string(b) + "\n"
	for i := 0; i < len(stream); i += 7 {
		if _, err := o.Write([]byte(stream[i:min(i+7, len(stream))])); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-o.ready:
	default:
		t.Error("ready line not seen")
	}
	if got := logs.String(); got != "capi stdout: something printed\n" {
		t.Errorf("stray lines = %q", got)
	}
	got, err := o.report()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(*got, rep) {
		t.Errorf("report = %+v, want %+v", *got, rep)
	}

	bad := newChildOutput(&logs)
	_, _ = bad.Write([]byte(reportPrefix + "{\n"))
	if _, err := bad.report(); err == nil || !strings.Contains(err.Error(), "decode") {
		t.Errorf("a broken report decoded: %v", err)
	}
}

// The kubeconfig written for Cluster API's process reaches the API server
// as the administrator does.
func TestAdminKubeconfig(t *testing.T) {
	admin := &rest.Config{Host: "https://127.0.0.1:6443", TLSClientConfig: rest.TLSClientConfig{
		CAData: []byte("ca"), CertData: []byte("cert"), KeyData: []byte("key"), ServerName: "localhost"}}
	b, err := adminKubeconfig(admin)
	if err != nil {
		t.Fatal(err)
	}
	got, err := clientcmd.RESTConfigFromKubeConfig(b)
	if err != nil {
		t.Fatal(err)
	}
	if got.Host != admin.Host || !reflect.DeepEqual(got.TLSClientConfig, admin.TLSClientConfig) {
		t.Errorf("config from the kubeconfig = %s %+v, want %s %+v", got.Host, got.TLSClientConfig, admin.Host, admin.TLSClientConfig)
	}
}

// Both processes have a clustercache controller: Cluster API's is
// prefixed, and each process's reconciles are summed apart.
func TestMergeReconciles(t *testing.T) {
	all, capct, capi := mergeReconciles(
		map[string]int{"containermachine": 10, "clustercache": 2},
		map[string]int{"machine": 7, "clustercache": 3},
	)
	want := map[string]int{"containermachine": 10, "clustercache": 2, capiReconcilePrefix + "machine": 7, capiReconcilePrefix + "clustercache": 3}
	if !reflect.DeepEqual(all, want) || capct != 12 || capi != 10 {
		t.Errorf("mergeReconciles = %v %d %d, want %v 12 10", all, capct, capi, want)
	}
	if all, capct, capi := mergeReconciles(map[string]int{"containermachine": 1}, nil); len(all) != 1 || capct != 1 || capi != 0 {
		t.Errorf("without Cluster API's report: %v %d %d", all, capct, capi)
	}
}
