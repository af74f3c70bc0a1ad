-- Orrery's persistence plane on PostgreSQL, version 5: an operator may
-- complete an effect no adapter will complete (Resolve). The receipt is
-- delivered as a completion's, and the operator's reason is kept with it:
-- NULL means the receipt, if any, is an adapter's; an operator who gave no
-- reason leaves ''. A retry clears it with the receipt. A nullable column
-- without a default is a catalogue change only: no table rewrite.
ALTER TABLE effects ADD COLUMN resolve_reason text;
