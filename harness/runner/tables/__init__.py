"""Tables built from records only: the long and wide tables every report starts from
(:mod:`.frames`), leaderboards (:mod:`.leaderboard`), paired comparisons and the ★ marks
(:mod:`.comparisons`), a prompt set's spread over its prompts (:mod:`.prompt_spread`), the
regression gate (:mod:`.gate`) and the PNG plots (:mod:`.plots`).
May import: records, settings."""
