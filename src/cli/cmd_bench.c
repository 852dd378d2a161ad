/* `kvrouter bench` (SPEC §9, issue 6): index throughput and match latency on
 * a trace-driven event stream, with a checksum so two implementations can be
 * compared on identical work. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "cli/args.h"
#include "cli/commands.h"
#include "bench/bench.h"
#include "util/clock.h"

static const char bench_usage[] =
    "usage: kvrouter bench [--trace FILE] [--workers W] [--capacity BLOCKS]\n"
    "                      [--block-size B] [--threads T] [--limit N] [--seed S]\n"
    "                      [--granularity sglang|vllm] [--pipeline] [--coalesce N]\n"
    "                      [--emit-events OUT.jsonl] [--events FILE]\n"
    "\n"
    "Builds the event stream of a simulated fleet for a Mooncake trace (default\n"
    "data/conversation_trace.jsonl): each request goes to a worker drawn uniformly\n"
    "(seeded), each worker runs an LRU prefix cache of BLOCKS blocks (default 16384)\n"
    "and publishes its stores/removes; one match per request precedes its store.\n"
    "--granularity sglang (default) publishes one store per block (parent = the\n"
    "previous block) and one remove per evicted block, as SGLang does; vllm one\n"
    "event per batch of blocks. The checksum is the same for both.\n"
    "--pipeline also encodes the stream as msgpack batches (SGLang tagged arrays,\n"
    "one batch per request's events) and applies them through the library facade\n"
    "(decode -> normalize -> hash -> index) on one thread, timing decode + apply\n"
    "only; its matches go through the facade too and must give the same checksum.\n"
    "--coalesce N (default 64) hands a run of stores that continue each other\n"
    "(same worker, each parented on the one before) to the index as one store of\n"
    "up to N blocks in the single-thread replay, as the library facade does with\n"
    "SGLang's per-page stores; events are still counted one by one. --coalesce 1\n"
    "makes one index call per event.\n"
    "Then replays the stream through the index on one thread and reports ops/s\n"
    "(events + matches), block ops/s, match latency, bytes per (worker, block)\n"
    "ownership and a checksum (sum of matched gpu blocks over all matches and\n"
    "workers). The rates time the index's work only: the checksum comes from a\n"
    "second replay on a fresh index that also reads every match result (its rate:\n"
    "ops_per_cpu_s_with_checksum). --threads T > 1 also replays events on one\n"
    "thread while T-1 threads run the matches concurrently. --emit-events writes\n"
    "the stream as JSON lines; --events replays such a file instead of building\n"
    "one. The last line of the output is one JSON object.\n";

int kvr_cmd_bench(int argc, char **argv)
{
    const char *trace_path = "data/conversation_trace.jsonl", *emit = NULL, *events = NULL;
    uint64_t workers = 1000, capacity = 16384, block_size = 16, threads = 1, limit = 0, seed = 42;
    kvr_bench_granularity gran = KVR_BENCH_SGLANG;
    bool pipeline = false;
    /* kvr_indexer_apply merges runs of parent-linked one-block stores into
     * index calls of up to 64 blocks; the plain replay does the same so the
     * default figure is the service's ingestion path. */
    uint64_t coalesce = 64;
    static const struct option opts[] = {
        {"trace", required_argument, NULL, 't'},    {"workers", required_argument, NULL, 'w'},
        {"capacity", required_argument, NULL, 'c'}, {"block-size", required_argument, NULL, 'b'},
        {"threads", required_argument, NULL, 'T'},  {"limit", required_argument, NULL, 'l'},
        {"seed", required_argument, NULL, 's'},     {"emit-events", required_argument, NULL, 'e'},
        {"events", required_argument, NULL, 'E'},   {"help", no_argument, NULL, 'h'},
        {"granularity", required_argument, NULL, 'g'}, {"pipeline", no_argument, NULL, 'P'},
        {"coalesce", required_argument, NULL, 'C'},
        {NULL, 0, NULL, 0},
    };
    optind = 1;
    opterr = 0;
    int ch, li = -1;
    while ((ch = getopt_long(argc, argv, "", opts, &li)) != -1) {
        int bad = 0;
        switch (ch) {
        case 't': trace_path = optarg; break;
        case 'e': emit = optarg; break;
        case 'E': events = optarg; break;
        case 'w': bad = kvr_cli_parse_u64(optarg, 1, 1u << 24, &workers); break;
        case 'c': bad = kvr_cli_parse_u64(optarg, 1, UINT32_MAX - 1, &capacity); break;
        case 'b': bad = kvr_cli_parse_u64(optarg, 1, 1u << 16, &block_size); break;
        case 'T': bad = kvr_cli_parse_u64(optarg, 1, 256, &threads); break;
        case 'l': bad = kvr_cli_parse_u64(optarg, 0, UINT32_MAX, &limit); break;
        case 's': bad = kvr_cli_parse_u64(optarg, 0, UINT64_MAX, &seed); break;
        case 'g':
            bad = strcmp(optarg, "sglang") == 0 ? (gran = KVR_BENCH_SGLANG, 0)
                  : strcmp(optarg, "vllm") == 0 ? (gran = KVR_BENCH_VLLM, 0)
                                                : -1;
            break;
        case 'P': pipeline = true; break;
        case 'C': bad = kvr_cli_parse_u64(optarg, 0, 65536, &coalesce); break;
        case 'h': fputs(bench_usage, stdout); return 0;
        default:
            return kvr_cli_usage_error("bench", "unknown option or missing value",
                                       argv[optind - 1]);
        }
        if (bad) {
            fprintf(stderr, "kvrouter bench: bad value for --%s: %s (try --help)\n",
                    opts[li].name, optarg);
            return 2;
        }
    }
    if (optind < argc)
        return kvr_cli_usage_error("bench", "unexpected argument", argv[optind]);
    if (pipeline && events)
        return kvr_cli_usage_error(
            "bench", "--pipeline needs the tokens of a built stream, not --events", NULL);

    kvr_bench_stream s;
    char err[512];
    double t0 = kvr_clock_seconds(CLOCK_MONOTONIC);
    if (events) {
        if (kvr_bench_read_events(events, &s, err, sizeof err) < 0) {
            fprintf(stderr, "kvrouter bench: %s\n", err);
            return 1;
        }
    } else {
        kvr_trace t;
        if (kvr_trace_load(trace_path, (size_t)limit, &t, err, sizeof err) < 0) {
            fprintf(stderr, "kvrouter bench: %s\n", err);
            return 1;
        }
        kvr_bench_config cfg = {(uint32_t)workers, (size_t)capacity, (uint32_t)block_size, seed,
                                gran, pipeline};
        int rc = kvr_bench_build(&t, &cfg, &s);
        kvr_trace_free(&t);
        if (rc < 0) {
            fprintf(stderr, "kvrouter bench: out of memory building the stream\n");
            return 1;
        }
    }
    double build_s = kvr_clock_seconds(CLOCK_MONOTONIC) - t0;
    if (emit) {
        FILE *f = fopen(emit, "w");
        if (!f || kvr_bench_write_events(&s, f) < 0) {
            fprintf(stderr, "kvrouter bench: %s: %s\n", emit, strerror(errno));
            if (f)
                fclose(f);
            kvr_bench_stream_free(&s);
            return 1;
        }
        fclose(f);
    }
    kvr_bench_result r = {0};
    if (kvr_bench_replay_coalesced(&s, (uint32_t)coalesce, &r) < 0 ||
        (threads > 1 && kvr_bench_replay_concurrent(&s, (int)threads, &r) < 0)) {
        fprintf(stderr, "kvrouter bench: replay failed (out of memory?)\n");
        kvr_bench_stream_free(&s);
        return 1;
    }
    kvr_bench_pipeline_result pr = {0};
    if (pipeline && kvr_bench_pipeline(&s, &pr) < 0) {
        fprintf(stderr, "kvrouter bench: pipeline replay failed (out of memory?)\n");
        kvr_bench_stream_free(&s);
        return 1;
    }
    kvr_bench_stream_free(&s);

    /* The rates are the index's: summing match results into the checksum
     * is the bench's work, timed in a replay of its own
     * (ops_per_cpu_s_with_checksum). */
    double index_s = r.seconds, index_cpu_s = r.cpu_seconds;
    double ops = (double)(r.events + r.matches) / index_s;
    double block_ops = (double)(r.event_blocks + r.match_blocks) / index_s;
    double bpb = r.stats.ownerships ? (double)r.stats.bytes / (double)r.stats.ownerships : 0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_mb = (double)ru.ru_maxrss / 1024.0;

    printf("stream      %s, %" PRIu64 " events + %" PRIu64 " matches (%s), built in %.2f s\n",
           events ? events : trace_path, r.events, r.matches,
           events ? "from file" : gran == KVR_BENCH_SGLANG ? "sglang: one block per event"
                                                          : "vllm: multi-block events",
           build_s);
    /* On a shared machine wall time includes other processes' turns: the
     * per-CPU-second rates show what one core does. */
    double cpu_ops = index_cpu_s > 0 ? (double)(r.events + r.matches) / index_cpu_s : 0;
    double cpu_block_ops =
        index_cpu_s > 0 ? (double)(r.event_blocks + r.match_blocks) / index_cpu_s : 0;
    double cpu_ops_all = r.checksum_cpu_seconds > 0
                             ? (double)(r.events + r.matches) / r.checksum_cpu_seconds
                             : 0;
    if (coalesce > 1)
        printf("coalesce    runs of parent-linked stores go to the index as one store of up to "
               "%" PRIu64 " blocks\n",
               coalesce);
    printf("replay      1 thread: %.3f s wall, %.0f ops/s, %.0f block ops/s\n", index_s, ops,
           block_ops);
    printf("            %.3f s cpu: %.0f ops/cpu-s, %.0f block ops/cpu-s; %.3f s of it in the kernel, "
           "%" PRIu64 " page faults\n",
           index_cpu_s, cpu_ops, cpu_block_ops, r.sys_seconds, r.page_faults);
    printf("            the index's work only; replayed again summing every match result "
           "into the checksum: %.3f s cpu, %.0f ops/cpu-s\n",
           r.checksum_cpu_seconds, cpu_ops_all);
    printf("events      %" PRIu64 " blocks, parent_not_found %" PRIu64
           ", unknown removes %" PRIu64 "\n",
           r.event_blocks, r.parent_not_found, r.unknown_removes);
    printf("match       p50 %.2f us, p99 %.2f us, max %.1f us (%.0f blocks/request)\n",
           r.match_p50_us, r.match_p99_us, r.match_max_us,
           r.matches ? (double)r.match_blocks / (double)r.matches : 0);
    printf("match %d   p50 %.2f us, p99 %.2f us (first %d blocks, final index); each request's "
           "fastest of %d passes: p50 %.2f us, p99 %.2f us\n",
           KVR_BENCH_SHORT, r.short_p50_us, r.short_p99_us, KVR_BENCH_SHORT,
           KVR_BENCH_SHORT_PASSES, r.short_fastest_p50_us, r.short_fastest_p99_us);
    printf("index       %" PRIu64 " nodes, %" PRIu64 " ownerships, %" PRIu64
           " owners, %.1f MB, %.1f bytes/ownership, %.1f bytes/node\n",
           r.stats.nodes, r.stats.ownerships, r.stats.owners, (double)r.stats.bytes / 1048576.0,
           bpb, r.stats.nodes ? (double)r.stats.bytes / (double)r.stats.nodes : 0);
    printf("churn       %" PRIu64 " block events; index bytes %" PRIu64 " before, %" PRIu64
           " after clearing every owner (%" PRIu64 " clears, the longest %.0f us of CPU)\n",
           r.event_blocks, r.bytes_baseline, r.bytes_after_clear, r.clears, r.clear_max_us);
    if (threads > 1)
        printf("concurrent  %d threads: %.0f events/s (writer), %.0f matches/s (%d readers), "
               "match p50 %.2f us p99 %.2f us, reader waits %" PRIu64
               " (total %.1f ms, max %.1f us)\n",
               r.threads, r.conc_events_per_s, r.conc_matches_per_s, r.threads - 1,
               r.conc_match_p50_us, r.conc_match_p99_us, r.reader_waits,
               r.reader_wait_total_ms, r.reader_wait_max_us);
    if (threads > 1) {
        static const char *const kinds[] = {"store", "remove", "clear", "match"};
        printf("            writer: %" PRIu64 " events over 1 ms, %" PRIu64
               " times preempted, %" PRIu64
               " page faults, %.3f s in the kernel; longest events:",
               r.writer_events_over_1ms, r.writer_preemptions, r.writer_page_faults,
               r.writer_sys_seconds);
        for (int k = 0; k < 3 && r.writer_longest[k].us > 0; k++)
            printf(" %.0f us (%s of %" PRIu32 ", op %zu)", r.writer_longest[k].us,
                   kinds[r.writer_longest[k].kind & 3], r.writer_longest[k].n,
                   r.writer_longest[k].op);
        printf("\n            the writer waited %.3f s for a core in all", r.writer_queued_s);
        if (r.wait_why.known)
            printf("; over the %.0f us sampled around the longest wait it ran %.0f us and "
                   "waited %.0f us for a core: of the wait, at least %.0f us the writer off its "
                   "core, %.0f us the reader woken but off its own",
                   r.wait_why.span_us, r.wait_why.writer_run_us, r.wait_why.writer_queued_us,
                   r.wait_why.writer_queued_min_us, r.wait_why.reader_queued_min_us);
        printf("\n            events alone, thread CPU time: longest %.0f us (%s of %" PRIu32
               ", op %zu); %" PRIu64 " table rebuilds under a read lock, longest %.0f us\n",
               r.event_cpu_max.us, kinds[r.event_cpu_max.kind & 3], r.event_cpu_max.n,
               r.event_cpu_max.op, r.table_rebuilds, r.rebuild_cpu_max_us);
    }
    bool pipe_ok = !pipeline || (pr.checksum == r.checksum && pr.matches == r.matches);
    if (pipeline) {
        printf("pipeline    %" PRIu64 " msgpack batches (%.1f MB), %" PRIu64 " events, %" PRIu64
               " blocks: decode+apply %.3f s wall, %.3f s cpu\n",
               pr.batches, (double)pr.bytes / 1048576.0, pr.events, pr.blocks, pr.seconds,
               pr.cpu_seconds);
        printf("            %.0f events/s, %.0f blocks/s (%.0f events/cpu-s, %.0f blocks/cpu-s); "
               "dropped %" PRIu64 "; checksum %" PRIu64 " %s\n",
               pr.seconds > 0 ? (double)pr.events / pr.seconds : 0,
               pr.seconds > 0 ? (double)pr.blocks / pr.seconds : 0,
               pr.cpu_seconds > 0 ? (double)pr.events / pr.cpu_seconds : 0,
               pr.cpu_seconds > 0 ? (double)pr.blocks / pr.cpu_seconds : 0, pr.events_dropped,
               pr.checksum, pipe_ok ? "(= plain replay)" : "(DIFFERS from the plain replay)");
    }
    printf("{\"ops_per_s\": %.0f, \"block_ops_per_s\": %.0f, \"events\": %" PRIu64
           ", \"matches\": %" PRIu64 ", \"match_p50_us\": %.3f, \"match_p99_us\": %.3f, "
           "\"bytes_per_block\": %.2f, \"peak_rss_mb\": %.1f, \"checksum\": %" PRIu64,
           ops, block_ops, r.events, r.matches, r.match_p50_us, r.match_p99_us, bpb, rss_mb,
           r.checksum);
    printf(", \"ops_per_cpu_s\": %.0f, \"block_ops_per_cpu_s\": %.0f, \"replay_sys_s\": %.4f, \"replay_page_faults\": %" PRIu64,
           cpu_ops, cpu_block_ops, r.sys_seconds, r.page_faults);
    printf(", \"checksum_cpu_s\": %.4f, \"ops_per_cpu_s_with_checksum\": %.0f",
           r.checksum_cpu_seconds, cpu_ops_all);
    printf(", \"match%d_p50_us\": %.3f, \"match%d_p99_us\": %.3f", KVR_BENCH_SHORT,
           r.short_p50_us, KVR_BENCH_SHORT, r.short_p99_us);
    printf(", \"match%d_fastest_p50_us\": %.3f, \"match%d_fastest_p99_us\": %.3f",
           KVR_BENCH_SHORT, r.short_fastest_p50_us, KVR_BENCH_SHORT, r.short_fastest_p99_us);
    if (threads > 1)
        printf(", \"threads\": %d, \"concurrent_events_per_s\": %.0f, "
               "\"concurrent_matches_per_s\": %.0f, \"concurrent_match_p99_us\": %.3f, "
               "\"reader_waits\": %" PRIu64 ", \"reader_wait_max_us\": %.1f, "
               "\"writer_longest_event_us\": %.1f, \"writer_events_over_1ms\": %" PRIu64
               ", \"writer_preemptions\": %" PRIu64 ", \"event_cpu_max_us\": %.1f"
               ", \"rebuild_cpu_max_us\": %.1f, \"writer_queued_s\": %.3f"
               ", \"reader_wait_max_writer_run_us\": %.1f"
               ", \"reader_wait_max_writer_queued_min_us\": %.1f",
               r.threads, r.conc_events_per_s, r.conc_matches_per_s, r.conc_match_p99_us,
               r.reader_waits, r.reader_wait_max_us, r.writer_longest[0].us,
               r.writer_events_over_1ms, r.writer_preemptions, r.event_cpu_max.us,
               r.rebuild_cpu_max_us, r.writer_queued_s, r.wait_why.writer_run_us,
               r.wait_why.writer_queued_min_us);
    if (pipeline)
        printf(", \"pipeline_events_per_s\": %.0f, \"pipeline_blocks_per_s\": %.0f, "
               "\"pipeline_events_per_cpu_s\": %.0f, \"pipeline_blocks_per_cpu_s\": %.0f, "
               "\"pipeline_batches\": %" PRIu64 ", \"pipeline_events_dropped\": %" PRIu64
               ", \"pipeline_checksum\": %" PRIu64,
               pr.seconds > 0 ? (double)pr.events / pr.seconds : 0,
               pr.seconds > 0 ? (double)pr.blocks / pr.seconds : 0,
               pr.cpu_seconds > 0 ? (double)pr.events / pr.cpu_seconds : 0,
               pr.cpu_seconds > 0 ? (double)pr.blocks / pr.cpu_seconds : 0, pr.batches,
               pr.events_dropped, pr.checksum);
    printf("}\n");
    return pipe_ok ? 0 : 1;
}
