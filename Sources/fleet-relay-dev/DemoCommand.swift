import ArgumentParser
import CommandLineSupport
import Egress
import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetSimulator
import Foundation
import InputFormats
import Kafka
import KafkaTesting
import Logging
import Relay
import ServiceLifecycle

struct DemoCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "demo",
        abstract: "Run the relay end to end on one machine: mock Kafka cluster, Fleet Engine emulator, simulated fleet.",
        discussion: "Prints one status line per second until Ctrl-C, then shuts down cleanly.")

    @Option(help: "Simulated vehicles.")
    var vehicles = 200

    @Option(help: "Events per second over the fleet. Default: one per vehicle per second.")
    var rate: Double?

    @Option(help: "Share of events (0–1) sent malformed, to show the dead-letter path.")
    var malformedShare = 0.005

    @Option(help: "Shape of the simulated records, read by the relay as the --input-format of the same name: \(SimulatedRecordFormat.allCases.map(\.rawValue).joined(separator: ", ")).")
    var format: SimulatedRecordFormat = .native

    @Option(help: "Partitions of the demo topic.")
    var partitions = 4

    @Option(help: "Emulator port (0 picks a free one).")
    var emulatorPort = 0

    @Option(help: "Stop by itself after this many seconds. Default: until Ctrl-C.")
    var duration: Double?

    @Option(help: "Log level: trace, debug, info, notice, warning, error or critical.")
    var logLevel: Logger.Level = .warning

    @Option(help: "HTTP version to the emulator: auto (HTTP/2 over TLS), 1.1 or 2.")
    var httpVersion: Egress.HTTPVersion = .automatic

    @Flag(help: "Plain HTTP/1.1 to the emulator instead of HTTPS, the production path.")
    var plainHttp = false

    func validate() throws {
        guard vehicles >= 1, partitions >= 1 else { throw ValidationError("--vehicles and --partitions must be at least 1") }
        guard (0...1).contains(malformedShare) else { throw ValidationError("--malformed-share must be from 0 to 1") }
        guard !plainHttp || httpVersion != .http2 else { throw ValidationError("--http-version 2 needs HTTPS; drop --plain-http") }
    }

    func run() async throws {
        LoggingOptions.bootstrap(level: logLevel)
        let logger = Logger(label: "fleet-relay-demo")
        let topic = "vehicle-locations"
        let cluster = try KafkaMockCluster(brokers: 3)
        try cluster.createTopic(topic, partitions: partitions)
        try cluster.createTopic(topic + ".dlq", partitions: 1)
        // The demo's Kafka clients live inside the call and end before the cluster does: a client
        // outliving it would log refused connections after the summary.
        let summary = try await relayUntilStopped(cluster: cluster, topic: topic, logger: logger)
        Console.line(summary)
        withExtendedLifetime(cluster) {}
    }

    /// Runs the emulator, the simulated fleet and the relay until Ctrl-C or the duration; returns the summary line.
    private func relayUntilStopped(cluster: KafkaMockCluster, topic: String, logger: Logger) async throws -> String {
        let key = try Self.throwawayKey()
        let emulator = FleetEngineEmulator(key: key, provider: key.projectId)
        // HTTPS with a throwaway CA that only this process trusts: the production path.
        let tlsDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-relay-demo-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: tlsDirectory) }
        let tls = plainHttp ? nil : try ThrowawayTLS.generate(in: tlsDirectory)
        let emulatorURL = try await emulator.start(port: emulatorPort, options: .init(tls: try tls?.serverTLS()))
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)

        let egress = try Egress.load(caFiles: tls.map { [$0.caFile] } ?? [], httpVersion: httpVersion)
        let client = FleetEngineClient(configuration: .init(baseURL: emulatorURL, provider: key.projectId, egress: egress))
        let relay = RelayService(
            configuration: RelayConfiguration(kafka: kafka, topic: topic, group: "fleet-relay-demo",
                                              inputMapping: format == .native ? nil : BuiltInFormat(rawValue: format.rawValue)?.mapping),
            client: client, tokens: TokenCache(signer: LocalKeySigner(key: key)), logger: logger,
            releaseFreedMemory: MallocTuning.releaseFreedMemory)
        let producer = try KafkaProducer(configuration: kafka, logger: logger)
        let feeder = FleetFeeder(topic: topic, vehicles: vehicles, rate: rate ?? Double(vehicles), malformedShare: malformedShare,
                                 encoder: format)
        Console.line("fleet-relay demo: mock Kafka at \(cluster.bootstrapServers), Fleet Engine emulator at \(emulatorURL)"
            + (plainHttp ? " (plain HTTP/1.1)" : " (HTTPS, throwaway CA)"))
        Console.line("feeding \(vehicles) vehicles at \(feeder.rate) events/s into '\(topic)' (\(partitions) partitions) as \(format.rawValue) records; Ctrl-C stops")

        let sideshow = DemoSideshow(feeder: feeder, producer: producer, relay: relay, emulator: emulator,
                                    duration: duration.map { .milliseconds(Int64($0 * 1000)) })
        let services = ServiceGroup(configuration: .init(
            services: [.init(service: relay), .init(service: sideshow, successTerminationBehavior: .gracefullyShutdownGroup)],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        try await producer.whileRunning { try await services.run() }
        await client.shutdown()
        let transport = emulator.transportStatistics.map { " over \($0.http2Requests) HTTP/2 and \($0.http1Requests) HTTP/1.1 requests" } ?? ""
        await emulator.shutdown()
        let totals = relay.statistics.snapshot
        return "stopped: consumed \(totals.consumed), forwarded \(totals.accepted + totals.superseded) in \(totals.requestsAccepted) requests, dead-lettered \(totals.deadLettered)\(totals.skipped > 0 ? ", skipped \(totals.skipped)" : ""), \(emulator.vehicles.count) vehicles in the emulator\(transport)"
    }

    static func throwawayKey() throws -> ServiceAccountKey {
        guard let json = ServiceAccountKey.generateKeyFileJSON(
            projectId: "fleet-relay-demo", clientEmail: "relay@fleet-relay-demo.iam.gserviceaccount.com",
            privateKeyId: "demo-key")
        else { throw StartupError("cannot generate an RSA key") }
        return try ServiceAccountKey.parse(Array(json.utf8), source: "generated demo key")
    }
}

/// Feeds the simulated fleet and prints a status line every second until
/// graceful shutdown (or the demo's duration) ends it.
struct DemoSideshow: Service {
    let feeder: FleetFeeder
    let producer: KafkaProducer
    let relay: RelayService
    let emulator: FleetEngineEmulator
    let duration: Duration?

    func run() async throws {
        await cancelWhenGracefulShutdown { await feedAndReport() }
    }

    private func feedAndReport() async {
        let start = ContinuousClock.now
        await withDiscardingTaskGroup { group in
            group.addTask { _ = try? await feeder.run(producer: producer, duration: duration) }
            group.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(1))
                    await printStatus(elapsed: ContinuousClock.now - start)
                    if let duration, ContinuousClock.now - start >= duration { break }
                }
            }
        }
    }

    private func printStatus(elapsed: Duration) async {
        let totals = relay.statistics.snapshot
        let seconds = elapsed.components.seconds
        Console.line("[\(seconds)s] consumed \(totals.consumed) | forwarded \(totals.accepted + totals.superseded) "
            + "(\(totals.requestsAccepted) requests) | dead-lettered \(totals.deadLettered) | "
            + (totals.skipped > 0 ? "skipped \(totals.skipped) | " : "")
            + "vehicles \(relay.vehicleCount) seen, \(emulator.vehicles.count) in Fleet Engine | "
            + "uncommitted \(relay.uncommittedRecords)\(relay.isPaused ? " | paused" : "")")
    }
}
