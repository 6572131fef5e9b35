// Exit codes and the usage error shared by every command.
export class UsageError extends Error {
  override name = "UsageError";
}

export const usage = `switchyard — a distributed inference fabric

Usage:
  switchyard up [--model NAME|PATH]… [--split N] [--processes N]
                                        router + local worker, embedded state (single machine); default models
                                        smollm2-135m-instruct + all-minilm-l6-v2 (e.g. --model gemma-3-270m)
                                        (--split N: N local shard workers of the chat model, blocks split by compute)
                                        (--processes N, default router.processes else 1: N router processes on a
                                        private redis-server from PATH, or redis.url, and the embedded PostgreSQL)
  switchyard router [--config FILE] [--embedded] [--processes N]
                                        start a router replica: needs redis.url | redis.cluster | redis.sentinels, and database.url
                                        (SIGTERM drains: /readyz 503, streams finish up to router.drainMs)
                                        N router processes share the listener (default: router.processes, else one per core);
                                        a dead one is restarted; the admin port's /metrics adds them all up
                                        (--embedded: in-process state + embedded PostgreSQL, to experiment)
  switchyard worker --redis URL --token SECRET [--config FILE] [--model NAME|PATH|hf://…]… [--advertise URL]
           [--port 9100] [--host 0.0.0.0] [--device auto|cpu|cuda|metal] [--id ID] [--key-prefix P]
           [--max-batch 16] [--max-seq-len 2048] [--memory-budget-mb MIB] [--engine BIN] [--engine-stall-ms 60000]
           [--fencing-key KEY] [--fencing-state FILE]
           [--layers START-END [--next URL [--next-token T]] [--shard-keepalive MS]]
                                        join this host as a worker (SIGTERM drains); --layers: one shard of a
                                        split model, blocks [START, END); --next: the shard after it;
                                        --shard-keepalive: a next shard silent this long is lost (5000; 0: off);
                                        --max-seq-len: the context a sequence may fill (a request without
                                        max_tokens generates until it stops or fills it); --max-batch: sequences
                                        decoded together; --memory-budget-mb: what weights + KV may take
                                        (default: the host's memory or cgroup limit); --engine: the engine binary;
                                        --engine-stall-ms: an engine owing an answer and silent this long is
                                        killed and restarted (60000; 0: off);
                                        --fencing-state: where the newest lease token seen is kept
                                        (default with --id: ~/.cache/switchyard/workers/ID.fence)
  switchyard workers invite NAME [--model M]… [--advertise URL]
                                        per-worker Redis ACL user + secret; prints the join command
  switchyard workers revoke NAME        remove an invited worker's Redis user
  switchyard spend [--from YYYY-MM-DD] [--to YYYY-MM-DD] [--tenant NAME] [--by day|backend|model] [--format table|csv]
                                        spend from the ledger (defaults: today, table)
  switchyard migrate                    apply database migrations
  switchyard db url                     print the database URL (the embedded one while 'up' runs)
  switchyard psql [--config FILE] [PSQL ARGS]…
                                        open psql on that database (arguments go to psql)
  switchyard tenants create NAME        create a tenant
  switchyard tenants list               list tenants
  switchyard keys create --tenant NAME [--name LABEL]
                                        create an API key (printed once)
  switchyard keys list --tenant NAME    list a tenant's keys
  switchyard keys revoke PREFIX         revoke a key by its visible prefix (sy_xxxxxxxx)
  switchyard budgets set NAME (--daily-cents N | --daily-usd D.CC) [--time-zone ZONE] [--alerts 50,80,100|none]
                                        set a tenant's daily limit for paid inference (zone: IANA, default UTC)
  switchyard budgets show NAME [--day YYYY-MM-DD]
                                        limit, ledger spend, live Redis counters and alerts for a day (default today)
  switchyard budgets list               every tenant's budget
  switchyard budgets delete NAME        remove a budget (paid inference unlimited again)
  switchyard budgets reconcile [NAME] [--day YYYY-MM-DD]
                                        rebuild the Redis counters from the ledger + live holds (all budgets if no NAME)
  switchyard limits set NAME [--rpm N|none] [--tpm N|none] [--key PREFIX]
                                        rate limit of a tenant (or of one of its keys): requests and tokens per minute
  switchyard limits show NAME           a tenant's rate limits, its own and its keys'
  switchyard limits clear NAME [--key PREFIX]
                                        remove a tenant's (or a key's) rate limit
  switchyard limits list                every rate limit
  switchyard prices set openrouter|anthropic|worker MODEL --input USD --output USD [--cached-input USD]
           [--cache-write USD] [--cache-write-1h USD] [--audio-input USD] [--image-token-multiplier X]
           [--long-context-over TOKENS --long-input USD --long-output USD [--long-cached-input USD]
            [--long-cache-write USD] [--long-cache-write-1h USD]] [--effective-from YYYY-MM-DD|ISO-INSTANT]
                                        add a price, in USD per million tokens (stored exactly in micro-cents);
                                        cache writes: 5-minute (unset: as input) and 1-hour (unset: 2× input);
                                        audio input (unset: as input); images counted at X× the usual tokens
                                        (up to 3 decimals, unset: 1; gpt-4o-mini: 33.336); a long-context tier:
                                        a prompt over TOKENS (cache reads and writes counted) puts every token
                                        of the request at the long rates (Anthropic: over 200000, Sonnet 6/22.5);
                                        long cache rates unset: the ordinary ones × long input ÷ input
  switchyard prices list [--backend B] [--model M]…
                                        every price row, marking the one in force now
  switchyard ledger retention --keep-months N [--archive-dir DIR] [--drop]
                                        archive (CSV) and detach spend_ledger months before the N kept
                                        (this month counts); --drop also deletes them once archived
  switchyard ledger partitions [ensure [--months-ahead N]]
                                        list the ledger's monthly partitions / create the next ones
  switchyard bench router [--quick] [--levels 1,100,1000] [--only money] [--cluster H:P,H:P,…] [--processes N] [--warm N]
                                        router overhead and money-path benchmarks (prints tables); each level's load
                                        runs N times unmeasured first (default 2, 1 with --quick: every process warm);
                                        each proxy's CPU per request and its event loop's wait for a core (run queue)
  switchyard bench router --profile DIR [--quick] [--levels 1|100|1000 | --only non-streaming] [--body-kb N]
                                        a CPU profile (node --cpu-prof) of one router under 100 streams (or that
                                        level's streams, or the non-streaming closed loop; --body-kb N: each request
                                        a conversation of about N KB instead of one short message): its wait for a core,
                                        top functions, the load's GC pauses and busy stretches (the event loop's
                                        stalls), its worker calls by how long undici held each before writing
                                        it, then the async resources (promises, ticks, timers) it creates,
                                        the bytes it allocates per request, by module, and what a request in
                                        flight keeps alive (heap snapshots), by kind
  switchyard bench router --against REV [--quick] [--rounds N] [--warm N] [--levels 1|100|1000 | --only non-streaming] [--rate-limits] [--against-node-flags=FLAGS] [--against-env='NAME=VALUE …'] [--body-kb N] [--rate N]
                                        this checkout's router and REV's (a temporary git worktree) taking turns:
                                        CPU per request, req/s, errors, the answered requests' p50/p99, ΔTTFT p99 and the wait for a core beside the bare proxy (a change's before/after),
                                        what Postgres and Redis spent per request, and the whole box's CPU per request process by
                                        process (the sim worker, the load generator) with its idle share; every target a fresh process per round, warmed first;
                                        N rounds (default 4, 2 with --quick, after --warm unmeasured ones, default 0), in how many of them this checkout used less CPU
                                        (and had the lower ΔTTFT p99), each count with its sign test's p, and
                                        the median of the rounds' ratios (this checkout over REV, each over the bare proxy)
                                        (--levels N: the streaming loop at that stream level, default 100)
                                        (--rate-limits: the tenant rate-limited, never refused: the limiter's cost on the path)
                                        (--against-node-flags: node flags for REV's router instead of the router's own,
                                        e.g. '--max-semi-space-size=16' (V8's default) against HEAD: a node setting's before/after)
                                        (--against-env: SWITCHYARD_… settings for REV's router only, e.g.
                                        'SWITCHYARD_ROUTER__MAX_IN_FLIGHT=256' against HEAD: a router setting's before/after)
                                        (--body-kb N: each request, whole or streamed, a conversation of about N KB instead of one
                                        short message: the body's parse, checks and way upstream at a real size)
                                        (--rate N: whole answers at N a second, an open loop, instead of the 64-client closed loop:
                                        every target's CPU per answer at one load, where the closed loop runs each as fast as it goes;
                                        below the slowest target's closed-loop req/s all are answered; past it, each answers what it can)
  switchyard bench engine [--quick] [--model NAME] [--reference both|native|node]
                                        engine vs llama.cpp on the same GGUF (prints a table; default smollm2-135m-instruct):
                                        llama.cpp built for this CPU (llama-cpp-python, built on first use, ~8 min on 2 cores)
                                        and node-llama-cpp's prebuilt; ratios against the stronger
  switchyard bench split [--quick] [--levels 1,8,16] [--threads N] [--cut balanced|even]
                                        one model unsplit vs split in 2 and 3 shards: tok/s, hop latency, wire bytes, memory
  switchyard bench admission [--quick]  interactive TTFT under 500 batch streams, admission on vs off (asserts both)
  switchyard bench routing [--quick]    latency-aware routing vs round-robin over 1×/2×/4× workers; resume after kill -9
  switchyard bench registry [--quick]   one registry poll's Redis commands, wall time and CPU as the keyspace grows:
                                        SCAN per poll (before) vs the registry's sets (now), on a private redis-server

Configuration: switchyard.yaml (or --config / SWITCHYARD_CONFIG) plus SWITCHYARD_* env;
DATABASE_URL unset → embedded PostgreSQL under $SWITCHYARD_HOME (default ./.switchyard).
budgets show|reconcile use redis.url / REDIS_URL, redis.cluster or redis.sentinels (or --redis URL) and redis.keyPrefix (or --key-prefix).`;
