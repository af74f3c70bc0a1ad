package store_test

import (
	"errors"
	"slices"
	"testing"

	"github.com/orrery-run/orrery/store"
)

func TestAdvertiseSortsAndDeduplicates(t *testing.T) {
	caps := []string{"world:b@1", "role:host", "world:b@1", "effect:pay"}
	o, err := store.ResolveHeartbeatOptions("heartbeat", []store.HeartbeatOption{store.Advertise(caps)})
	if err != nil || !o.Advertised() {
		t.Fatalf("Resolve = %+v, %v", o, err)
	}
	if want := []string{"effect:pay", "role:host", "world:b@1"}; !slices.Equal(o.Capabilities, want) {
		t.Fatalf("Capabilities = %q, want %q", o.Capabilities, want)
	}
	if caps[0] != "world:b@1" {
		t.Fatalf("Advertise reordered the caller's slice: %q", caps)
	}
	if o, _ := store.ResolveHeartbeatOptions("heartbeat", nil); o.Advertised() {
		t.Fatal("a heartbeat without Advertise must not advertise")
	}
	_, err = store.ResolveHeartbeatOptions("heartbeat", []store.HeartbeatOption{store.Advertise([]string{""})})
	if !errors.Is(err, store.ErrInvalid) {
		t.Fatalf("an empty capability: %v, want ErrInvalid", err)
	}
}

func TestHasCapability(t *testing.T) {
	w := store.WorkerInfo{Capabilities: []string{"effect:pay", "role:host", "world:b@1"}}
	for c, want := range map[string]bool{"role:host": true, "world:b@1": true, "effect:pay": true, "role:timers": false, "world:b@2": false, "": false} {
		if got := store.HasCapability(w, c); got != want {
			t.Errorf("HasCapability(%q) = %v, want %v", c, got, want)
		}
	}
	if !store.HasCapability(store.WorkerInfo{}, "role:timers") {
		t.Error("a worker that advertised nothing (an older binary) must carry everything")
	}
}
