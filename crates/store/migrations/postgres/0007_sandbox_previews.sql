-- Preview-URL access of /v1 sandboxes whose owner turned it on: one row per
-- such sandbox, with the token requests must carry (NULL: public). E2B
-- sandboxes keep theirs in e2b_sandboxes.
CREATE TABLE sandbox_previews (
    id        uuid PRIMARY KEY,
    workspace text NOT NULL,
    token     text
);
