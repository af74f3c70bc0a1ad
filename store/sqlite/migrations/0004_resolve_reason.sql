-- An operator may complete an effect no adapter will complete (Resolve):
-- the receipt is delivered as a completion's, and the operator's reason is
-- kept with it. NULL means the receipt, if any, is an adapter's; an
-- operator who gave no reason leaves ''. A retry clears it with the
-- receipt.
ALTER TABLE effects ADD COLUMN resolve_reason TEXT;
