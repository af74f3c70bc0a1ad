//go:build unix

package main

// The chaos checker's judge. It reads the database with plain SQL and
// decodes the journal's CBOR itself, with a reduction of its own of the
// worlds the load drives (tally counts, account balances and holds), so
// that a bug in the project's store or codec code cannot hide itself by
// being the thing that checks. Only "every world replays" uses the
// project's replay, since that is the promise under test there.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	"github.com/fxamacker/cbor/v2"
	"github.com/jackc/pgx/v5"

	"github.com/orrery-run/orrery/workflow"
)

// The checks, in the order the report lists them.
const (
	chkAckedOnce    = "every acknowledged operation journaled exactly once"
	chkDrainedOnce  = "no inbox item journaled twice"
	chkMoney        = "ledger money conserved"
	chkHolds        = "no hold left open"
	chkRuns         = "every acknowledged workflow run completed once"
	chkReplies      = "every call's reply equals the state at its height"
	chkCallIDs      = "call ids unique across calls"
	chkGapless      = "journal heights gapless"
	chkReplays      = "every world replays"
	chkEpochsRise   = "lease epochs only rise"
	chkOneHolder    = "one holder per (world, epoch)"
	chkRestartEpoch = "a restarted worker takes new epochs"
	chkQuiescent    = "quiescent after the faults healed"
	chkNo500        = "no request refused as an internal error or for good"
)

var checkOrder = []string{
	chkAckedOnce, chkDrainedOnce, chkMoney, chkHolds, chkRuns, chkReplies, chkCallIDs,
	chkGapless, chkReplays, chkEpochsRise, chkOneHolder, chkRestartEpoch, chkQuiescent, chkNo500,
}

// verdict collects violations per check; a check with none passed.
type verdict struct {
	ran        map[string]bool
	violations map[string][]string
}

func newVerdict() *verdict {
	return &verdict{ran: map[string]bool{}, violations: map[string][]string{}}
}

func (v *verdict) check(name string) { v.ran[name] = true }

func (v *verdict) failf(name, format string, a ...any) {
	v.ran[name] = true
	v.violations[name] = append(v.violations[name], fmt.Sprintf(format, a...))
}

func (v *verdict) failed() bool {
	for _, vs := range v.violations {
		if len(vs) > 0 {
			return true
		}
	}
	return false
}

// table prints each check with its verdict and its first violations.
func (v *verdict) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-52s %s\n", "check", "result")
	for _, name := range checkOrder {
		switch vs := v.violations[name]; {
		case len(vs) > 0:
			fmt.Fprintf(&b, "%-52s FAIL (%d)\n", name, len(vs))
			for _, s := range vs[:min(5, len(vs))] {
				fmt.Fprintf(&b, "    %s\n", s)
			}
		case v.ran[name]:
			fmt.Fprintf(&b, "%-52s ok\n", name)
		default:
			fmt.Fprintf(&b, "%-52s not run\n", name)
		}
	}
	return b.String()
}

// ---- what the client saw ----

// ackOp is an event the API acknowledged: durable in World's inbox at Seq
// under idempotency key Key.
type ackOp struct {
	World, Kind, Key string
	Seq              uint64
}

// callOp is a call the API answered.
type callOp struct {
	World, Kind string
	CallID      string // the id the answer names
	Chosen      bool   // the client chose the id (else the server drew it)
	Attempt     string // the client's own name for the request
	ReplyCBOR   []byte
}

// ---- what the database holds ----

// dbRecord is one journal record, decoded by the checker.
type dbRecord struct {
	Height    uint64
	Seq       uint64 // the inbox item it drained (0: a timer fired directly)
	Kind      string // the input kind
	Type      string // the input's type name (event, call, fabric)
	CallID    string
	Outcome   string
	ReplyHash string
	Value     cbor.RawMessage // the input's value (event, call, fabric)
}

// dbWorld is one world as the database holds it.
type dbWorld struct {
	ID, Universe       string
	Head, Cursor, Last uint64 // journal head, inbox cursor, last inbox seq handed out
	Baseline           uint64 // the active snapshot's height (0: none)
	BaseState          []byte // its image
	Inbox              map[uint64]string
	Records            []dbRecord
}

// The journal record's shape, as the checker reads it.
type wireRecord struct {
	V     uint64 `cbor:"v"`
	Input struct {
		Seq     uint64 `cbor:"seq"`
		Kind    string `cbor:"kind"`
		CallID  string `cbor:"call_id"`
		Payload []byte `cbor:"payload"`
	} `cbor:"input"`
	Outcome   string `cbor:"outcome"`
	ReplyHash string `cbor:"reply_hash"`
}

// wireMessage is an event, call or fabric input's payload.
type wireMessage struct {
	Type   string          `cbor:"type"`
	Value  cbor.RawMessage `cbor:"value"`
	CallID string          `cbor:"call_id"`
}

func decodeRecord(height uint64, payload []byte) (dbRecord, error) {
	var w wireRecord
	if err := cbor.Unmarshal(payload, &w); err != nil {
		return dbRecord{}, fmt.Errorf("height %d: record: %w", height, err)
	}
	if w.V != 1 {
		return dbRecord{}, fmt.Errorf("height %d: record version %d", height, w.V)
	}
	r := dbRecord{Height: height, Seq: w.Input.Seq, Kind: w.Input.Kind, CallID: w.Input.CallID, Outcome: w.Outcome, ReplyHash: w.ReplyHash}
	switch r.Kind {
	case "event", "call", "fabric":
		var m wireMessage
		if err := cbor.Unmarshal(w.Input.Payload, &m); err != nil {
			return dbRecord{}, fmt.Errorf("height %d: %s input: %w", height, r.Kind, err)
		}
		r.Type, r.Value = m.Type, m.Value
		if r.CallID == "" {
			r.CallID = m.CallID
		}
	}
	return r, nil
}

// readDB reads every world of the store in schema (its journal, inbox
// and snapshot baseline) with plain SQL. Workflow runs are left out: their
// streams hold run events, not world records, and the run checks (chkRuns)
// read them.
func readDB(ctx context.Context, conn *pgx.Conn, schema string) (map[string]*dbWorld, error) {
	q := func(sql string) string { return strings.ReplaceAll(sql, "$S.", pgx.Identifier{schema}.Sanitize()+".") }
	out := map[string]*dbWorld{}
	rows, err := conn.Query(ctx, q(`SELECT w.world, w.universe, w.inbox_seq, coalesce(s.head, 0), coalesce(s.inbox_cursor, 0), coalesce(s.baseline_height, 0)
		FROM $S.worlds w LEFT JOIN $S.streams s ON s.stream = w.world
		WHERE NOT starts_with(w.universe, $1)`), workflow.UniversePrefix)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		w := &dbWorld{Inbox: map[uint64]string{}}
		if err := rows.Scan(&w.ID, &w.Universe, &w.Last, &w.Head, &w.Cursor, &w.Baseline); err != nil {
			return nil, err
		}
		out[w.ID] = w
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, q(`SELECT world, seq, coalesce(dedupe_key, '') FROM $S.inbox`))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id, key string
		var seq uint64
		if err := rows.Scan(&id, &seq, &key); err != nil {
			return nil, err
		}
		if w := out[id]; w != nil {
			w.Inbox[seq] = key
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, q(`SELECT stream, run_seq, payload FROM $S.events ORDER BY stream, run_seq`))
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var id string
		var h uint64
		var payload []byte
		if err := rows.Scan(&id, &h, &payload); err != nil {
			return nil, err
		}
		w := out[id]
		if w == nil {
			continue // a workflow run's stream
		}
		r, err := decodeRecord(h, payload)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		w.Records = append(w.Records, r)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, w := range out {
		if w.Baseline == 0 {
			continue
		}
		if err := conn.QueryRow(ctx, q(`SELECT state FROM $S.snapshots WHERE world = $1 AND height = $2`), w.ID, w.Baseline).Scan(&w.BaseState); err != nil {
			return nil, fmt.Errorf("%s: snapshot at %d: %w", w.ID, w.Baseline, err)
		}
	}
	return out, nil
}

// ---- the checker's own reduction of the worlds ----

// account is what the checker keeps of a ledger account.
type account struct {
	Owner   string
	Balance int64
	Holds   []accountHold
	Voided  []string
}

type accountHold struct {
	Transfer string
	Amount   int64
}

func (a *account) holdIndex(transfer string) int {
	return slices.IndexFunc(a.Holds, func(h accountHold) bool { return h.Transfer == transfer })
}

func (a *account) available() int64 {
	n := a.Balance
	for _, h := range a.Holds {
		n -= h.Amount
	}
	return n
}

// apply is one step of an account, as the ledger's rules say (a step
// whose handler failed changes nothing). It returns what a call of the
// step must have answered (nil: no reply).
func (a *account) apply(r dbRecord) (reply any, err error) {
	if r.Outcome != "ok" {
		return nil, nil
	}
	var m struct {
		Owner, Transfer string
		Amount          int64
	}
	if len(r.Value) > 0 && r.Kind != "receipt" {
		if err := cbor.Unmarshal(r.Value, &m); err != nil {
			return nil, fmt.Errorf("height %d: %s: %w", r.Height, r.Type, err)
		}
	}
	switch r.Type {
	case "ledger/Open":
		a.Owner = m.Owner
	case "ledger/Deposit":
		a.Balance += m.Amount
	case "ledger/Withdraw":
		a.Balance -= m.Amount
	case "ledger/Hold":
		switch i := slices.Index(a.Voided, m.Transfer); {
		case a.holdIndex(m.Transfer) >= 0:
		case i >= 0:
			a.Voided = slices.Delete(a.Voided, i, i+1)
		case a.Owner == "", a.available() < m.Amount:
		default:
			a.Holds = append(a.Holds, accountHold{Transfer: m.Transfer, Amount: m.Amount})
		}
	case "ledger/Release":
		if i := a.holdIndex(m.Transfer); i >= 0 {
			a.Holds = slices.Delete(a.Holds, i, i+1)
		} else if !slices.Contains(a.Voided, m.Transfer) {
			a.Voided = append(a.Voided, m.Transfer)
			if len(a.Voided) > 256 {
				a.Voided = a.Voided[len(a.Voided)-256:]
			}
		}
	case "ledger/Capture":
		if i := a.holdIndex(m.Transfer); i >= 0 {
			a.Balance -= a.Holds[i].Amount
			a.Holds = slices.Delete(a.Holds, i, i+1)
		}
	}
	switch r.Type {
	case "ledger/Open", "ledger/Deposit", "ledger/Withdraw", "ledger/Balance":
		return a.Balance, nil
	}
	return nil, nil
}

// tallyCounts is what the checker keeps of a cluster tally world.
type tallyCounts struct {
	Adds map[string]int
}

func (s *tallyCounts) apply(r dbRecord) (reply any, err error) {
	if r.Outcome != "ok" {
		return nil, nil
	}
	switch r.Type {
	case "cluster/Add":
		var m struct{ Key string }
		if err := cbor.Unmarshal(r.Value, &m); err != nil {
			return nil, fmt.Errorf("height %d: %s: %w", r.Height, r.Type, err)
		}
		if s.Adds == nil {
			s.Adds = map[string]int{}
		}
		s.Adds[m.Key]++
	case "cluster/Get":
		return map[string]int64{"Adds": int64(len(s.Adds)), "Alarms": 0, "Beeps": 0, "Pays": 0, "Receipts": 0}, nil
	}
	return nil, nil
}

// reduced is a world reduced by the checker: its final state and what
// each call in its journal must have answered, by call id.
type reduced struct {
	account *account
	tally   *tallyCounts
	replies map[string]any    // call id → the reply the state at its height gives
	heights map[string]uint64 // call id → its height
}

// reduce runs the checker's reduction over a world's journal from its
// baseline (genesis, or the active snapshot's image when the journal
// below it is gone).
func reduce(w *dbWorld) (*reduced, error) {
	out := &reduced{replies: map[string]any{}, heights: map[string]uint64{}}
	var apply func(dbRecord) (any, error)
	switch w.Universe {
	case "ledger.account":
		out.account = &account{}
		apply = out.account.apply
		if len(w.Records) > 0 && w.Records[0].Height > 1 && w.BaseState != nil {
			var img struct {
				State cbor.RawMessage `cbor:"state"`
			}
			if err := cbor.Unmarshal(w.BaseState, &img); err != nil {
				return nil, fmt.Errorf("%s: snapshot image: %w", w.ID, err)
			}
			if err := cbor.Unmarshal(img.State, out.account); err != nil {
				return nil, fmt.Errorf("%s: snapshot state: %w", w.ID, err)
			}
		}
	case clusterUniverse:
		out.tally = &tallyCounts{}
		apply = out.tally.apply
	default:
		return out, nil
	}
	for _, r := range w.Records {
		if w.Baseline > 0 && r.Height <= w.Baseline && w.Records[0].Height > 1 {
			continue
		}
		rep, err := apply(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.ID, err)
		}
		if r.CallID != "" {
			out.replies[r.CallID], out.heights[r.CallID] = rep, r.Height
		}
	}
	return out, nil
}

// ---- the checks over the database ----

// checkJournals checks each world's heights (gapless from genesis or its
// baseline up to the head) and that no inbox item was journaled twice.
func checkJournals(ws map[string]*dbWorld, v *verdict) {
	v.check(chkGapless)
	v.check(chkDrainedOnce)
	for _, id := range slices.Sorted(maps.Keys(ws)) {
		w := ws[id]
		want := uint64(1)
		if len(w.Records) > 0 && w.Records[0].Height > 1 && w.Baseline > 0 {
			want = w.Records[0].Height
			if want > w.Baseline+1 {
				v.failf(chkGapless, "%s: the journal starts at height %d, above the baseline %d + 1", id, want, w.Baseline)
			}
		}
		for _, r := range w.Records {
			if r.Height != want {
				v.failf(chkGapless, "%s: height %d follows %d", id, r.Height, want-1)
				break
			}
			want++
		}
		if n := uint64(len(w.Records)); n > 0 && w.Records[n-1].Height != w.Head {
			v.failf(chkGapless, "%s: the last record is at height %d, the head at %d", id, w.Records[n-1].Height, w.Head)
		}
		seen := map[uint64]uint64{}
		for _, r := range w.Records {
			if r.Seq == 0 {
				continue
			}
			if h, dup := seen[r.Seq]; dup {
				v.failf(chkDrainedOnce, "%s: inbox item %d (key %q) journaled at heights %d and %d", id, r.Seq, w.Inbox[r.Seq], h, r.Height)
			}
			seen[r.Seq] = r.Height
		}
	}
}

// checkAcks checks that every acknowledged event sits in its world's
// inbox at its seq under its key and is journaled exactly once, and that
// every acknowledged call with the client's id is journaled once. It
// returns how many were lost (not journaled) and duplicated.
func checkAcks(ws map[string]*dbWorld, red map[string]*reduced, acks []ackOp, calls []callOp, v *verdict) (lost, dup int) {
	v.check(chkAckedOnce)
	bySeq := map[string]map[uint64]int{}
	byCall := map[string]map[string]int{}
	keys := map[string]map[string]bool{}
	for id, w := range ws {
		bySeq[id], byCall[id], keys[id] = map[uint64]int{}, map[string]int{}, map[string]bool{}
		for _, k := range w.Inbox {
			keys[id][k] = true
		}
		for _, r := range w.Records {
			if r.Seq > 0 {
				bySeq[id][r.Seq]++
			}
			if r.CallID != "" {
				byCall[id][r.CallID]++
			}
		}
	}
	for _, a := range acks {
		w := ws[a.World]
		if w == nil {
			v.failf(chkAckedOnce, "%s %q acknowledged on world %s, which the database does not hold", a.Kind, a.Key, a.World)
			lost++
			continue
		}
		if key, ok := w.Inbox[a.Seq]; !ok || key != a.Key {
			v.failf(chkAckedOnce, "%s: %s %q acknowledged at inbox seq %d, which holds %q (present %v)", a.World, a.Kind, a.Key, a.Seq, key, ok)
			lost++
			continue
		}
		switch n := bySeq[a.World][a.Seq]; {
		case n == 0:
			v.failf(chkAckedOnce, "%s: %s %q (inbox seq %d) acknowledged but never journaled", a.World, a.Kind, a.Key, a.Seq)
			lost++
		case n > 1:
			v.failf(chkAckedOnce, "%s: %s %q (inbox seq %d) journaled %d times", a.World, a.Kind, a.Key, a.Seq, n)
			dup++
		}
		if rd := red[a.World]; rd != nil && rd.tally != nil && a.Kind == "add" {
			if n := rd.tally.Adds[a.Key]; n > 1 {
				v.failf(chkAckedOnce, "%s: add %q counted %d times by the journal", a.World, a.Key, n)
				dup++
			}
		}
	}
	for _, c := range calls {
		if !c.Chosen {
			continue
		}
		switch n := byCall[c.World][c.CallID]; {
		case n == 0:
			v.failf(chkAckedOnce, "%s: call %q answered but never journaled", c.World, c.CallID)
			lost++
		case n > 1:
			v.failf(chkAckedOnce, "%s: call %q journaled %d times", c.World, c.CallID, n)
			dup++
		}
		if key := "call:" + c.CallID; !keys[c.World][key] {
			v.failf(chkAckedOnce, "%s: call %q answered but its inbox item (%q) is absent", c.World, c.CallID, key)
		}
	}
	return lost, dup
}

// checkReplies checks every answered call against the journal: its call
// id names a record of the world it was sent to, the reply's hash is the
// one that record journaled, and the reply is what the checker's own
// reduction gives at that height. Call ids must be unique across calls:
// one id answering two requests means one of them got the other's reply.
func checkReplies(ws map[string]*dbWorld, red map[string]*reduced, calls []callOp, v *verdict) {
	v.check(chkReplies)
	v.check(chkCallIDs)
	owner := map[string]string{} // call id → the request that got it
	for _, c := range calls {
		if prev, dup := owner[c.CallID]; dup {
			v.failf(chkCallIDs, "call id %q answered two requests: %s and %s", c.CallID, prev, c.Attempt)
			continue
		}
		owner[c.CallID] = c.Attempt
	}
	recByCall := map[string]map[string]dbRecord{}
	for id, w := range ws {
		recByCall[id] = map[string]dbRecord{}
		for _, r := range w.Records {
			if r.CallID != "" {
				recByCall[id][r.CallID] = r
			}
		}
	}
	for _, c := range calls {
		r, ok := recByCall[c.World][c.CallID]
		if !ok {
			v.failf(chkReplies, "%s: %s answered with call id %q, which no record of the world carries", c.World, c.Attempt, c.CallID)
			continue
		}
		sum := sha256.Sum256(c.ReplyCBOR)
		if got := hex.EncodeToString(sum[:]); got != r.ReplyHash {
			v.failf(chkReplies, "%s: %s (call %q, height %d): the reply's hash %.12s is not the journaled %.12s", c.World, c.Attempt, c.CallID, r.Height, got, r.ReplyHash)
			continue
		}
		rd := red[c.World]
		if rd == nil {
			continue
		}
		want, ok := rd.replies[c.CallID]
		if !ok {
			continue
		}
		if err := sameReply(c.ReplyCBOR, want); err != nil {
			v.failf(chkReplies, "%s: %s (call %q, height %d): %v", c.World, c.Attempt, c.CallID, rd.heights[c.CallID], err)
		}
	}
}

// sameReply decodes a reply and compares it with the value the reduction
// expects (an int64 or a map of counts).
func sameReply(raw []byte, want any) error {
	switch w := want.(type) {
	case int64:
		var got int64
		if err := cbor.Unmarshal(raw, &got); err != nil {
			return fmt.Errorf("reply does not decode as an integer: %w", err)
		}
		if got != w {
			return fmt.Errorf("reply %d, the state at that height says %d", got, w)
		}
	case map[string]int64:
		var got map[string]int64
		if err := cbor.Unmarshal(raw, &got); err != nil {
			return fmt.Errorf("reply does not decode as a summary: %w", err)
		}
		if !reflect.DeepEqual(got, w) {
			return fmt.Errorf("reply %v, the state at that height says %v", got, w)
		}
	case nil:
		return fmt.Errorf("the step at that height gives no reply")
	}
	return nil
}

// checkMoney checks the ledger: the accounts' balances (which count their
// held units) sum to what was deposited at the start, and no hold is
// left open once every transfer has settled.
func checkMoney(ws map[string]*dbWorld, red map[string]*reduced, initial int64, v *verdict) (total int64) {
	v.check(chkMoney)
	v.check(chkHolds)
	for _, id := range slices.Sorted(maps.Keys(red)) {
		a := red[id].account
		if a == nil {
			continue
		}
		total += a.Balance
		for _, h := range a.Holds {
			v.failf(chkHolds, "%s: %d held for transfer %s at quiescence", id, h.Amount, h.Transfer)
		}
		if a.Balance < 0 {
			v.failf(chkMoney, "%s: balance %d", id, a.Balance)
		}
	}
	if total != initial {
		v.failf(chkMoney, "the accounts hold %d in all, %d was deposited (%+d)", total, initial, total-initial)
	}
	return total
}

// ---- leases ----

// leaseObs is one sighting of a lease row.
type leaseObs struct {
	At        float64 // seconds since the run started
	World     string
	Holder    string
	Epoch     int64
	ExpiresNs int64
	Ended     bool // the world is archived: its lease ended for good
}

// checkEpochs checks the lease sightings in order: a world's epoch never
// goes down, and one (world, epoch) never has two holders.
func checkEpochs(obs []leaseObs, v *verdict) {
	v.check(chkEpochsRise)
	v.check(chkOneHolder)
	last := map[string]leaseObs{}
	holder := map[string]map[int64]string{}
	for _, o := range obs {
		if p, ok := last[o.World]; ok && o.Epoch < p.Epoch {
			v.failf(chkEpochsRise, "%s: epoch %d (held by %q at %.1fs) after epoch %d (%q at %.1fs)", o.World, o.Epoch, o.Holder, o.At, p.Epoch, p.Holder, p.At)
		}
		last[o.World] = o
		if o.Holder == "" {
			continue // released: the epoch stays, without a holder
		}
		if holder[o.World] == nil {
			holder[o.World] = map[int64]string{}
		}
		if h, ok := holder[o.World][o.Epoch]; ok && h != o.Holder {
			v.failf(chkOneHolder, "%s: epoch %d held by %q and by %q", o.World, o.Epoch, h, o.Holder)
		}
		holder[o.World][o.Epoch] = o.Holder
	}
}

// restartSight is what a restart of a worker within its lease TTL must
// not show: a lease the new incarnation holds at an epoch its killed
// predecessor held the same world at. A lease of the old incarnation
// expires at most one TTL after the kill; one that expires later was
// renewed or acquired after the kill, by the new incarnation.
type restartSight struct {
	Worker  string
	KillNs  int64            // the store's clock at the kill
	TTLNs   int64            // the lease TTL
	Before  map[string]int64 // world → epoch the killed incarnation held it at
	AtSecs  float64
	Restart float64 // seconds since start of the restart
}

func checkRestartEpochs(rs []restartSight, obs []leaseObs, v *verdict) {
	v.check(chkRestartEpoch)
	for _, r := range rs {
		seen := map[string]bool{}
		for _, o := range obs {
			if o.At < r.Restart || o.Holder != r.Worker || seen[o.World] {
				continue
			}
			if e, ok := r.Before[o.World]; ok && e == o.Epoch && o.ExpiresNs > r.KillNs+r.TTLNs {
				seen[o.World] = true
				v.failf(chkRestartEpoch, "%s: %s restarted %.1fs after its kill -9 and holds it at epoch %d, its killed incarnation's", o.World, r.Worker, r.Restart-r.AtSecs, o.Epoch)
			}
		}
	}
}
