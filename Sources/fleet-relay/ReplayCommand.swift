import ArgumentParser
import CommandLineSupport
import Egress
import FleetAuth
import FleetEngine
import FleetModel
import Foundation
import Kafka
import Logging
import OpsServer
import Prometheus
import Relay
import Replay
import ServiceLifecycle

enum ProgressStyleArgument: String, ExpressibleByArgument, CaseIterable {
    case auto, bar, log
}

/// `fleet-relay replay`: a bounded backfill next to the live relay.
struct ReplayCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "replay",
        abstract: "Replay a time window of the location topic into Fleet Engine (backfill after an outage).",
        discussion: """
            Reads the window by explicit partition assignment (no consumer group, no commits) and streams it \
            through the relay's pipeline: every fix of the window is sent, each vehicle's oldest first, in \
            requests of up to --max-past-locations + 1 fixes; Fleet Engine's live location is read before every \
            request, and fixes not newer than it are skipped. Stops by itself at the window's end and prints a \
            summary. Exit status: 0 everything sent or skipped, 1 some fixes failed or records of the window were \
            deleted by retention before they were read, 128+signal when interrupted.
            """)

    @OptionGroup var kafka: KafkaOptions

    @Option(help: "Topic of vehicle location events.")
    var topic: String

    // Unconditional: relative times start with a dash and must not be taken for flags.
    @Option(parsing: .unconditional, help: "Start of the window: RFC 3339 (2026-11-22T21:00:00Z) or relative to now (-2h, -90m, -30s, -1d).")
    var from: String

    @Option(parsing: .unconditional, help: "End of the window (exclusive), in the same forms as --from.")
    var to: String?

    @Flag(help: "Replay up to each partition's end as it is when the replay starts.")
    var toEnd = false

    @Option(help: "Only these partitions, comma-separated (e.g. 0,3,5). Default: all.")
    var partitions: String?

    @Option(name: [.customLong("rate"), .customLong("max-requests-per-second")],
            help: "Fleet Engine requests per second at most, as run's --max-requests-per-second: each replayed update also reads the live location first, so 100 is 50 updates a second. Beneath it the replay paces at the rate Fleet Engine admits, learnt from its 429s. 0: no ceiling.")
    var rate: Double = 100

    @Flag(help: "Read the window and print what would be sent, without calling Fleet Engine.")
    var dryRun = false

    @Option(help: "File recording the window and, per partition, the offset below which every record finished, so an interrupted replay resumes where it stopped.")
    var checkpoint: String?

    @Flag(help: "Send without comparing with Fleet Engine's live locations (may move vehicles back in time).")
    var force = false

    @Flag(help: "Discard the --checkpoint file's replay and start over (resolving the window anew).")
    var restart = false

    @Flag(help: "Only count bad records instead of writing them to the dead-letter topic.")
    var noDeadLetter = false

    @Option(help: "Dead-letter topic. Default: <topic>.dlq.")
    var deadLetterTopic: String?

    @Option(help: "Kind for events without a \"kind\" field: vehicle or delivery_vehicle.")
    var kind: VehicleKind = .vehicle

    @Option(help: "Older fixes sent with a vehicle's newest one, at most (pastLocations).")
    var maxPastLocations = 100

    @Option(help: "Records read and not yet finished, at most: bounds memory (about 0.5 KB each). Vehicles wait for a full request of --max-past-locations + 1 fixes until this is reached.")
    var maxPendingRecords = ReplayConfiguration.defaultMaximumPendingRecords

    @Option(help: "Give up on a vehicle whose update keeps failing for this long (dead-lettered, or counted as failed and retried on resume with --no-dead-letter).")
    var retryDeadline = DurationArgument(argument: "2m")!

    @Option(help: "Time an interrupted replay waits for its requests under way before saving the checkpoint without them: 500ms, 20s, 1m.")
    var shutdownTimeout = DurationArgument(argument: "20s")!

    @Option(help: "Port for /metrics, /healthz, /readyz during the replay (metrics labelled mode=\"replay\"). Default: none.")
    var metricsPort: Int?

    @Option(help: "Address the ops endpoint listens on.")
    var metricsHost = "0.0.0.0"

    @Option(help: "Progress display: auto (a bar on a terminal, log lines every 10 s otherwise), bar or log.")
    var progress: ProgressStyleArgument = .auto

    @OptionGroup var input: InputOptions
    @OptionGroup var signer: SignerOptions
    @OptionGroup var egressOptions: EgressOptions
    @OptionGroup var fleetEngine: FleetEngineOptions
    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        guard (to != nil) != toEnd else { throw ValidationError("give exactly one of --to and --to-end") }
        guard rate >= 0, rate.isFinite else { throw ValidationError("--rate must be a number of requests per second, 0 for unlimited") }
        guard maxPastLocations >= 0 else { throw ValidationError("--max-past-locations must not be negative") }
        guard maxPendingRecords > 0 else { throw ValidationError("--max-pending-records must be positive") }
        _ = try window()
        _ = try partitionList()
    }

    func window() throws -> (from: Int64, to: Int64?) {
        let now = WallClock.nowMilliseconds()
        do {
            let start = try ReplayTime.parse(from, nowMilliseconds: now)
            let end = try to.map { try ReplayTime.parse($0, nowMilliseconds: now) }
            if let end, end <= start { throw ValidationError("--to must be later than --from") }
            return (start, end)
        } catch let error as ReplayTime.ParseError {
            throw ValidationError("--from/--to: \(error)")
        }
    }

    func partitionList() throws -> [Int32]? {
        guard let partitions else { return nil }
        let values = partitions.split(separator: ",").map { Int32($0.trimmingCharacters(in: .whitespaces)) }
        guard !values.isEmpty, values.allSatisfy({ $0 != nil && $0! >= 0 }) else {
            throw ValidationError("--partitions must be partition numbers separated by commas, e.g. 0,3,5")
        }
        return Array(Set(values.compactMap { $0 })).sorted()
    }

    func run() async throws {
        logging.bootstrap()
        let logger = Logger(label: "fleet-relay.replay")
        let kafkaConfiguration = try kafka.validatedConfiguration()
        let (fromMilliseconds, toMilliseconds) = try window()
        let inputMapping = try input.mapping()
        let registry = RelayMetricsSystem.bootstrap(version: FleetRelayVersion.current, mode: "replay")
        let sender = try await makeSender(logger: logger)
        var configuration = ReplayConfiguration(
            topic: topic, partitions: try partitionList(), fromMilliseconds: fromMilliseconds, toMilliseconds: toMilliseconds,
            rate: rate > 0 ? rate : nil, maximumInFlight: fleetEngine.maxInFlight, dryRun: dryRun,
            checkpointPath: checkpoint, force: force, deadLetterTopic: noDeadLetter ? nil : deadLetterTopic ?? topic + ".dlq",
            defaultKind: kind, inputMapping: inputMapping, pastLimit: maxPastLocations, maximumPendingRecords: maxPendingRecords,
            retryDeadline: retryDeadline.duration)
        configuration.schemaSource = try input.schemaSource(egress: try egressOptions.egress())
        configuration.restart = restart
        configuration.shutdownTimeout = shutdownTimeout.duration
        configuration.requestedAs = ReplayRequest(from: Self.requested(from, fromMilliseconds), to: to.map { Self.requested($0, toMilliseconds!) },
                                                  partitions: try partitionList())
        let style: ReplayProgress.Style = switch progress {
        case .auto: ReplayProgress.automaticStyle()
        case .bar: .bar
        case .log: .logLines
        }
        let replayer = Replayer(configuration: configuration, kafka: kafkaConfiguration, sender: sender,
                                progress: ReplayProgress(style: style, logger: logger), logger: logger)
        let ops = try await startOps(registry: registry, health: replayer.health)
        logger.info("Replaying \(topic) from \(RFC3339.format(milliseconds: fromMilliseconds)) to \(toMilliseconds.map { RFC3339.format(milliseconds: $0) } ?? "the end")", metadata: [
            "rate": "\(rate > 0 ? "\(rate)/s" : "unlimited")", "dry_run": "\(dryRun)", "force": "\(force)",
            "checkpoint": "\(checkpoint ?? "none")",
        ])
        // The replay ends the group when it is done; a signal shuts it down gracefully first.
        let replay = ServiceGroupConfiguration.ServiceConfiguration(service: replayer, successTerminationBehavior: .gracefullyShutdownGroup)
        let services = ServiceGroup(configuration: .init(
            services: (ops.map { [.init(service: $0)] } ?? []) + [replay], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        let interrupt = SecondSignalExit(logger: logger, firstSignalMeans: "finishing in-flight requests and saving the checkpoint")
        defer { withExtendedLifetime(interrupt) {} }
        let outcome: Result<Void, any Error>
        do {
            try await services.run()
            outcome = .success(())
        } catch {
            outcome = .failure(error)
        }
        await sender?.client.shutdown()
        let (summary, plan): (ReplaySummary, Replayer.Plan)
        do {
            try outcome.get()
            guard let result = replayer.result else { throw CancellationError() }
            (summary, plan) = result
        } catch let mismatch as ReplayCheckpoint.Mismatch {
            throw ValidationError(mismatch.description)
        } catch {
            throw StartupError("replay failed: \(error)")
        }
        if dryRun { print(Self.describe(plan)) }
        print(summary.table)
        if summary.interrupted, let signal = interrupt.received {
            logger.warning("Interrupted: \(summary.unfinished) records read and not finished\(checkpoint.map { "; resume with --checkpoint \($0)" } ?? "")")
            throw ExitCode(128 + signal)
        }
        if summary.failed > 0 || !summary.deletedBeforeRead.isEmpty { throw ExitCode(1) }
    }

    /// Runs the replay; the first signal (`untilSignal` ends) cancels it, and it then saves its
    /// checkpoint and returns what it did.
    static func requested(_ text: String, _ milliseconds: Int64) -> String {
        text.hasPrefix("-") ? text : RFC3339.format(milliseconds: milliseconds)
    }

    private func makeSender(logger: Logger) async throws -> ReplaySender? {
        guard !dryRun else { return nil }
        let egress = try egressOptions.egress()
        let setup = try await signer.makeSigner(egress: egress) { logger.warning("\($0)") }
        let client = FleetEngineClient(configuration: try fleetEngine.clientConfiguration(defaultProvider: setup.defaultProvider, egress: egress))
        return ReplaySender(client: client, tokens: signer.makeTokenCache(setup.signer, logger: logger))
    }

    private func startOps(registry: PrometheusCollectorRegistry, health: RelayHealth) async throws -> OpsServer? {
        guard let metricsPort else { return nil }
        do {
            return try await OpsServer(
                host: metricsHost, port: metricsPort, registry: registry, help: RelayMetricNames.help,
                liveness: { health.liveness.map(OpsServer.Check.init) },
                readiness: { health.readiness.map(OpsServer.Check.init) })
        } catch {
            throw StartupError("cannot serve the ops endpoint on \(metricsHost):\(metricsPort): \(error)")
        }
    }

    /// The dry run's report: the window per partition and what would be sent.
    static func describe(_ plan: Replayer.Plan) -> String {
        var lines = ["window"]
        for window in plan.windows {
            lines.append("  partition \(window.partition): offsets \(window.start)..<\(window.end) (\(window.records) records, \(window.method == .search ? "found by binary search" : "broker lookup"))")
        }
        let counts = plan.fixesPerVehicle
        lines.append("would send")
        lines.append("  vehicles  \(plan.vehicles)")
        lines.append("  requests  \(plan.requests) (every fix, oldest first, up to \(plan.fixesPerRequest) per request)")
        if !counts.isEmpty {
            let mean = Double(counts.reduce(0, +)) / Double(counts.count)
            lines.append("  events per vehicle  min \(counts.min()!), mean \(String(format: "%.1f", mean)), max \(counts.max()!)")
        }
        if let oldest = plan.oldestMilliseconds, let newest = plan.newestMilliseconds {
            lines.append("  oldest fix  \(RFC3339.format(milliseconds: oldest))")
            lines.append("  newest fix  \(RFC3339.format(milliseconds: newest))")
        }
        return lines.joined(separator: "\n")
    }
}
