-- Who decided a pairing request, and how: `approved` or `denied` (NULL while it waits, and for
-- codes used before this migration). A denied sender gets no new code while the denied
-- request is kept (a day after it would have expired), so the owner is not asked again.
ALTER TABLE pairing_requests ADD COLUMN decision TEXT;
ALTER TABLE pairing_requests ADD COLUMN decided_by TEXT;
