package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
)

func TestClusterLanes(t *testing.T) {
	s := &scenario{b: &bench{o: options{deliveryRounds: 2}}, slot: "slot", prefix: "pre", tmp: t.TempDir()}
	bc := &benchCluster{c: &testsvc.Cluster{Nodes: []*testsvc.ClusterNode{{ID: 1, Port: 9001}, {ID: 2, Port: 9002}, {ID: 3, Port: 9003}}},
		k: &kafkaClient{}}
	ls := s.clusterLanes(bc, []change.ExportID{exportID("public.t")})
	var names, slots []string
	for _, l := range ls {
		names, slots = append(names, l.name), append(slots, l.vars["CDC_SLOT"])
		onCluster := l.vars["CDC_KAFKA_BROKERS"] != ""
		if onCluster != (l.name == "cluster") || (l.kc != nil) != onCluster || (l.brokerCPU != nil) != onCluster {
			t.Errorf("lane %s (slot %s): brokers %q, own client %v, broker CPU %v", l.name, l.vars["CDC_SLOT"], l.vars["CDC_KAFKA_BROKERS"], l.kc != nil, l.brokerCPU != nil)
		}
	}
	if got := strings.Join(names, " "); got != "single cluster cluster single" {
		t.Errorf("order %q, want single cluster cluster single", got)
	}
	if got := strings.Join(slots, " "); got != "slot_single0 slot_cluster0 slot_cluster1 slot_single1" {
		t.Errorf("slots %q: each lane needs a slot of its own", got)
	}
	if got := ls[1].vars["CDC_KAFKA_BROKERS"]; got != "127.0.0.1:9001,127.0.0.1:9002,127.0.0.1:9003" {
		t.Errorf("cluster lane's brokers %q", got)
	}
}

func TestPrintCluster(t *testing.T) {
	run := func(perSecond, cpu float64) catchUp {
		return catchUp{CDC: throughput{PerSecond: perSecond}, CPUSeconds: cpu, BrokerCPUSeconds: 1.5}
	}
	c := &clusterRun{Nodes: 3, ReplicationFactor: 3, MinInsyncReplicas: 2, Heap: clusterHeap, StartSeconds: 8, RSSMiB: []int64{300, 310, 305},
		Single: []catchUp{run(100_000, 2), run(120_000, 2)}, Cluster: []catchUp{run(60_000, 3), run(66_000, 3)},
		SinglePerSecond: 110_000, ClusterPerSecond: 63_000, Ratio: 63_000.0 / 110_000}
	var out bytes.Buffer
	printCluster(&out, c, 220_000)
	for _, want := range []string{"single broker  median   110000 changes/s = 0.50 of READ (runs 100000, 120000)",
		"cluster        median    63000 changes/s = 0.29 of READ", "cluster / single broker = 0.57", "RSS per node [300 310 305] MiB"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
	out.Reset()
	printCluster(&out, nil, 1)
	if out.Len() != 0 {
		t.Errorf("nothing to print without -cluster, got %q", out.String())
	}
}

func TestMidMedian(t *testing.T) {
	for _, tt := range []struct {
		v    []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{4, 2}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{9, 1, 3, 5}, 4}} {
		if got := midMedian(tt.v); got != tt.want {
			t.Errorf("midMedian(%v) = %v, want %v", tt.v, got, tt.want)
		}
	}
}
