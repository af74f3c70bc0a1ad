package sqlite

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orrery-run/orrery/store"
)

func TestChunkSizeIsTheNextPowerOfTwo(t *testing.T) {
	for _, c := range []struct{ n, sz, size int }{
		{1, 0, 1}, {2, 1, 2}, {3, 2, 4}, {4, 2, 4}, {46, 6, 64}, {129, 8, 256}, {acquireChunk, 8, acquireChunk},
	} {
		if sz, size := chunkSize(c.n); sz != c.sz || size != c.size {
			t.Errorf("chunkSize(%d) = (%d, %d), want (%d, %d)", c.n, sz, size, c.sz, c.size)
		}
	}
	if _, top := chunkSize(acquireChunk); len(acquireReads) != 9 || len(acquireWrites) != 9 || top != acquireChunk {
		t.Errorf("%d reads and %d writes for chunks up to %d, want 9 each", len(acquireReads), len(acquireWrites), acquireChunk)
	}
}

// AcquireLeases over more worlds than one chunk: the full chunk and the
// padded last one (46 ids in a statement of 64) are read and written alike,
// in one request.
func TestAcquireLeasesAcrossChunksOfEverySize(t *testing.T) {
	s, _, _ := openTemp(t, WithSynchronous(SyncOff))
	var worlds []string
	for i := range acquireChunk + 44 {
		w := fmt.Sprintf("w%03d", i)
		if _, err := s.CreateWorld(bg, "u", w, nil); err != nil {
			t.Fatal(err)
		}
		worlds = append(worlds, w)
	}
	// A world named twice keeps the lease its first occurrence took; an
	// unknown one is its own answer.
	worlds = append(worlds, "nowhere", worlds[acquireChunk+1])
	before := s.Stats()
	res, err := s.AcquireLeases(bg, "worker", worlds, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Stats().Requests - before.Requests; d != 1 {
		t.Fatalf("AcquireLeases took %d requests, want 1", d)
	}
	if len(res) != len(worlds) {
		t.Fatalf("%d results for %d worlds", len(res), len(worlds))
	}
	for i, r := range res {
		if worlds[i] == "nowhere" {
			if !errors.Is(r.Err, store.ErrWorldNotFound) {
				t.Fatalf("result %d (%s): %v, want ErrWorldNotFound", i, r.World, r.Err)
			}
			continue
		}
		if r.Err != nil || r.World != worlds[i] || r.Lease.Holder != "worker" || r.Lease.Epoch != 1 {
			t.Fatalf("result %d = %+v, want %s held by worker at epoch 1", i, r, worlds[i])
		}
	}
	for _, w := range []string{worlds[0], worlds[acquireChunk-1], worlds[acquireChunk], worlds[acquireChunk+43]} {
		l, ok, err := s.GetLease(bg, w)
		if err != nil || !ok || l.Holder != "worker" || l.Epoch != 1 {
			t.Fatalf("GetLease(%s) = %+v, %v, %v; want held by worker at epoch 1", w, l, ok, err)
		}
	}
}
