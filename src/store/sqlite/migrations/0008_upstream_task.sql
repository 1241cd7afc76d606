-- The id an A2A agent behind the door gave a task (backend = "a2a"): peergate answers peers
-- under its own task ids and continues or cancels the agent's task under this one.
ALTER TABLE tasks ADD COLUMN upstream_task_id TEXT;
