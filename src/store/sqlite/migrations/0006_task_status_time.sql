-- When each task's status last changed, so ListTasks can order a peer's tasks newest status
-- first (then by id) and page through them by that key.
ALTER TABLE tasks ADD COLUMN status_at INTEGER;
UPDATE tasks SET status_at = created_at;
CREATE INDEX tasks_by_peer_status ON tasks(peer_id, status_at DESC, id DESC);
