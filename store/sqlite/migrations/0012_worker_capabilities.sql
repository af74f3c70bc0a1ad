-- A worker's capabilities: what its last advertising heartbeat said it
-- carries (roles, world types, workflow versions, effect kinds), as a JSON
-- array of strings, sorted and without duplicates. '[]': it never
-- advertised (an older binary), which readers take as carrying everything.
ALTER TABLE workers ADD COLUMN capabilities TEXT NOT NULL DEFAULT '[]';
