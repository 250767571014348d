import ArgumentParser
import CommandLineSupport
import Egress
import FleetAuth
import FleetEngine
import Kafka
import Logging
import OpsServer
import Relay
import ServiceLifecycle

struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Relay vehicle locations from a Kafka topic to Fleet Engine until SIGTERM or SIGINT.")

    @OptionGroup var kafka: KafkaOptions

    @Option(help: "Topic of vehicle location events.")
    var topic: String

    @Option(help: "Kafka consumer group; replicas sharing it split the topic's partitions.")
    var group = "fleet-relay"

    @Option(help: "Static group membership: a stable id per replica (e.g. a StatefulSet pod's name). A replica that restarts within the session timeout gets its partitions back without a rebalance.")
    var groupInstanceId: String?

    @Option(help: "Port of the ops endpoint (/metrics, /healthz, /readyz); 0 picks a free one.")
    var metricsPort = 9090

    @Option(help: "Address the ops endpoint listens on.")
    var metricsHost = "0.0.0.0"

    @Option(help: "How long Fleet Engine or the signer may fail, or records wait for the Schema Registry, before /readyz reports not ready.")
    var readyMaxOutage = DurationArgument(argument: "60s")!

    @OptionGroup var signer: SignerOptions
    @OptionGroup var egressOptions: EgressOptions
    @OptionGroup var fleetEngine: FleetEngineOptions
    @OptionGroup var input: InputOptions
    @OptionGroup var pipeline: PipelineOptions
    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        try pipeline.validate(requestTimeoutSeconds: fleetEngine.requestTimeout)
    }

    func run() async throws {
        logging.bootstrap()
        let logger = Logger(label: "fleet-relay")
        let inputMapping = try input.mapping()
        for flag in pipeline.ignoredFlags {
            logger.warning("\(flag) has no effect any more: a fix goes out as soon as its vehicle has no request under way")
        }
        var kafkaConfiguration = try kafka.validatedConfiguration()
        if let groupInstanceId { kafkaConfiguration["group.instance.id"] = groupInstanceId }
        let egress = try egressOptions.egress()
        let setup = try await signer.makeSigner(egress: egress) { logger.warning("\($0)") }
        let clientConfiguration = try fleetEngine.clientConfiguration(defaultProvider: setup.defaultProvider, egress: egress)
        // Before anything makes its metric handles: each part counts into handles it makes once.
        let registry = RelayMetricsSystem.bootstrap(version: FleetRelayVersion.current)
        let client = FleetEngineClient(configuration: clientConfiguration)
        let tokens = signer.makeTokenCache(setup.signer, logger: logger)
        var relayConfiguration = pipeline.relayConfiguration(
            kafka: kafkaConfiguration, topic: topic, group: group, maxInFlight: fleetEngine.maxInFlight,
            requestTimeoutSeconds: fleetEngine.requestTimeout)
        relayConfiguration.readyMaximumOutage = readyMaxOutage.duration
        relayConfiguration.inputMapping = inputMapping
        relayConfiguration.schemaSource = try input.schemaSource(egress: egress)
        let relay = RelayService(configuration: relayConfiguration, client: client, tokens: tokens, logger: logger,
                                 releaseFreedMemory: MallocTuning.releaseFreedMemory)
        logger.info("fleet-relay \(FleetRelayVersion.current) starting", metadata: [
            "brokers": "\(kafka.brokers)", "topic": "\(topic)", "group": "\(group)",
            "dead_letter_topic": "\(relayConfiguration.deadLetterTopic)", "input": "\(input.name)",
            "fleet_engine": "\(clientConfiguration.baseURL)", "provider": "\(clientConfiguration.provider)",
            "fleet_engine_protocol": "\(clientConfiguration.wireProtocol.rawValue)",
            "location_mode": "\(clientConfiguration.locationMode.rawValue)", "max_in_flight": "\(fleetEngine.maxInFlight)",
            "token_scope": "\(signer.tokenScope.rawValue)", "http_version": "\(fleetEngine.httpVersion.rawValue)",
            "fleet_engine_connections": "\(client.http2ConnectionLimit.map { "HTTP/2, as the server's stream limit needs, up to \($0)" } ?? "HTTP/1.1, one per request under way")",
            "kafka_properties": "\(kafkaConfiguration.redacted.filter { $0.key != "bootstrap.servers" })",
        ].merging(setup.logMetadata) { current, _ in current }.merging(EgressOptions.logMetadata(egress)) { current, _ in current })
        let ops: OpsServer
        do {
            let health = relay.health
            ops = try await OpsServer(
                host: metricsHost, port: metricsPort, registry: registry, help: RelayMetricNames.help,
                beforeScrape: { await relay.refreshGauges() },
                liveness: { health.liveness.map(OpsServer.Check.init) },
                readiness: { health.readiness.map(OpsServer.Check.init) })
        } catch {
            await client.shutdown()
            throw StartupError("cannot serve the ops endpoint on \(metricsHost):\(metricsPort): \(error)")
        }
        logger.info("Ops endpoint on http://\(metricsHost):\(ops.port) (/metrics, /healthz, /readyz)")
        // Shut down in reverse order: the relay drains first, the ops endpoint answers until the end.
        let services = ServiceGroup(configuration: .init(
            services: [ops, relay], gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        let secondSignal = SecondSignalExit(logger: logger)
        defer { withExtendedLifetime(secondSignal) {} }
        do {
            try await services.run()
        } catch {
            await client.shutdown()
            throw error
        }
        await client.shutdown()
    }
}
