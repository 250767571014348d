import FleetAuth
import FleetEngine
import FleetEngineEmulator
import FleetSimulator
import Foundation
import HTTPServing
import JSON
import Kafka
import Relay
import Testing

/// Services the relay depends on, down for 75 s under a steady stream, through the binary:
/// the relay waits, loses nothing and commits nothing past a waiting record; `/readyz` says
/// why it is not ready; `/healthz` answers 200 throughout, since a restart mends neither
/// outage (in Kubernetes a failing liveness probe would restart every replica again and again).
@Suite(.serialized) struct DependencyOutageTests {
    static let outage = Duration.seconds(75)

    /// What the ops endpoint answered, once a second, while a dependency was down.
    struct OpsSamples {
        var liveness: [Int] = []
        var readiness: [(status: Int, body: String)] = []

        /// Readiness answers 503 with `check` failing and its detail containing `words`.
        func sawNotReady(_ check: String, saying words: String) -> Bool {
            readiness.contains { status, body in
                guard status == 503, let parsed = try? JSONParser.parse(Array(body.utf8)) else { return false }
                return parsed["checks"]?[check]?["ok"] == .bool(false)
                    && parsed["checks"]?[check]?["detail"]?.stringValue?.contains(words) == true
            }
        }
    }

    /// Produces one round of fixes every half second, and samples `/healthz` and `/readyz` once
    /// a second, until `outage` passed; returns every fix produced and the samples.
    static func streamThroughOutage(metricsPort: Int, round: (Int) async throws -> [GeneratedEvents.Event])
        async throws -> (fixes: [GeneratedEvents.Event], samples: OpsSamples) {
        let until = ContinuousClock.now + outage
        let sampler = Task { () -> OpsSamples in
            var samples = OpsSamples()
            let base = "http://127.0.0.1:\(metricsPort)"
            while ContinuousClock.now < until {
                if let live = try? await httpGet(base + "/healthz") { samples.liveness.append(live.status) }
                if let ready = try? await httpGet(base + "/readyz") { samples.readiness.append(ready) }
                try? await Task.sleep(for: .seconds(1))
            }
            return samples
        }
        var fixes: [GeneratedEvents.Event] = []
        var index = 0
        while ContinuousClock.now < until {
            fixes += try await round(index)
            index += 1
            try await Task.sleep(for: .milliseconds(500))
        }
        return (fixes, await sampler.value)
    }

    /// Fixes from ten minutes ago on, half a second apart per vehicle.
    static let streamStart = Int64(Date().timeIntervalSince1970 * 1000) - 600_000

    static func relayArguments(_ harness: RelayHarness, group: String, metricsPort: Int) -> [String] {
        ["run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", group,
         "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile, "--kafka-property", "session.timeout.ms=6000",
         "--metrics-port", String(metricsPort), "--metrics-host", "127.0.0.1", "--ready-max-outage", "30s",
         "--commit-interval-ms", "200", "--log-format", "text"]
    }

    /// Nothing in the dead-letter topic, as a second Kafka client sees it.
    static func deadLetterTopicIsEmpty(_ harness: RelayHarness) async throws -> Bool {
        try await KafkaInspector(configuration: harness.kafka, group: "inspector", logger: harness.logger)
            .highWatermarks(topic: harness.topic + ".dlq", partitions: 1).values.allSatisfy { $0 == 0 }
    }

    /// Once the dependency is back: every fix delivered and committed, nothing dead-lettered, ready
    /// again, no vehicle moved backwards, and a clean stop.
    static func expectEverythingDeliveredAfterwards(_ fixes: [GeneratedEvents.Event], _ harness: RelayHarness, group: String,
                                                   relay: IntegrationTests.CommandLineTests.RunningProcess, metricsPort: Int) async throws {
        try await harness.waitUntilEverythingIsDelivered(GeneratedEvents(events: fixes), group: group)
        #expect(try await deadLetterTopicIsEmpty(harness))
        try await eventually("/readyz answers 200 again") { try await httpGet("http://127.0.0.1:\(metricsPort)/readyz").status == 200 }
        relay.process.terminate()
        let result = await relay.finish()
        #expect(result.status == 0, "\(result.stderrExcerpt(2000))")
        #expect(harness.backwardsUpdates == 0)
    }

    static func expectHealthyThroughout(_ samples: OpsSamples) {
        // About one sample a second over 75 s; a machine busy with the other suites answers slower,
        // and one sample every 2.5 s still shows a restart (a probe fails three times in 30 s).
        #expect(samples.liveness.count >= 30, "sampled /healthz \(samples.liveness.count) times")
        #expect(samples.liveness.allSatisfy { $0 == 200 },
                "/healthz answered \(samples.liveness.filter { $0 != 200 }.count) times other than 200: a liveness probe would restart the relay")
    }

    /// Avro records whose schema the relay has never seen, while the Schema Registry refuses
    /// every lookup for 75 s: fetching pauses for every partition as the pipeline wishes (no
    /// pause of the consumer's own), readiness names the registry, liveness holds.
    @Test func aSchemaRegistryOutageOf75SecondsKeepsTheRelayAliveAndLosesNothing() async throws {
        let harness = try await RelayHarness(partitions: 2)
        let registry = SchemaRegistryEmulator()
        let server = try await EmulatorHost.start([registry])
        let encoder = AvroFixEncoder(schemaId: Int32(registry.register(subject: harness.topic + "-value", schema: AvroFixEncoder.schema)))
        registry.setAvailable(false)
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess(
            Self.relayArguments(harness, group: "registry-outage", metricsPort: metricsPort)
                + ["--key-file", harness.writeKeyFile(), "--schema-registry", server.baseURL])
        relay.watchLog()
        let start = Self.streamStart
        var fleet = SimulatedFleet(count: 10)
        let (fixes, samples) = try await Self.streamThroughOutage(metricsPort: metricsPort) { round in
            let simulated = (0..<10).map { fleet.nextFix(vehicle: $0, seconds: 0.5, recordedAtMilliseconds: start + Int64(round) * 500) }
            try await harness.produce(simulated.map(encoder.record(of:)).map { (Optional($0.key), $0.value) })
            return simulated.map {
                .init(vehicle: $0.vehicleId, latitude: $0.latitude, longitude: $0.longitude, recordedAt: $0.recordedAtMilliseconds)
            }
        }
        Self.expectHealthyThroughout(samples)
        #expect(samples.sawNotReady("schema_registry", saying: "records wait for their schema"),
                "/readyz named the registry: \(samples.readiness.last?.body ?? "no answer")")
        #expect(registry.statistics.refusedWhileDown >= 5, "the relay kept asking")
        #expect(harness.emulator.statistics.updateRequests == 0, "nothing is sent without its schema")
        #expect(try await harness.committedOffsets(group: "registry-outage").values.allSatisfy { $0 == nil }, "nothing committed")
        #expect(try await Self.deadLetterTopicIsEmpty(harness), "nothing dead-lettered")
        #expect(relay.log.contains("Fetching paused for every partition"), "the log says why fetching paused")

        registry.setAvailable(true)
        try await Self.expectEverythingDeliveredAfterwards(fixes, harness, group: "registry-outage", relay: relay, metricsPort: metricsPort)
        await server.shutdown()
        await harness.shutdown()
    }

    /// The token service answers 503 to every call for 75 s while native records keep coming:
    /// records wait in their vehicles' lanes (fetching pauses at the pending bound, as the
    /// pipeline wishes), readiness names the signer, liveness holds.
    @Test func aSignerOutageOf75SecondsKeepsTheRelayAliveAndLosesNothing() async throws {
        let harness = try await RelayHarness(partitions: 2)
        let tokenService = TokenServiceEmulator(key: harness.key)
        let server = try await EmulatorHost.start([tokenService])
        tokenService.behaviour = .down
        let metricsPort = try freeLoopbackPort()
        let relay = try IntegrationTests.CommandLineTests.RunningProcess(
            Self.relayArguments(harness, group: "signer-outage", metricsPort: metricsPort) + [
                "--signer", "token-service", "--token-url", server.baseURL + TokenServiceEmulator.path,
                "--provider", harness.key.projectId, "--max-pending-records", "400",
                "--retry-initial-ms", "100", "--retry-max-ms", "2000",
            ])
        relay.watchLog()
        let (fixes, samples) = try await Self.streamThroughOutage(metricsPort: metricsPort) { round in
            let events = (0..<10).map { vehicle in
                GeneratedEvents.Event(vehicle: "veh-\(vehicle)", latitude: 37 + Double(round) / 10_000, longitude: -122 - Double(vehicle) / 1000,
                                      recordedAt: Self.streamStart + Int64(round) * 500 + Int64(vehicle))
            }
            try await harness.produce(events.map(\.record))
            return events
        }
        Self.expectHealthyThroughout(samples)
        #expect(samples.sawNotReady("signer", saying: "failing for"), "/readyz named the signer: \(samples.readiness.last?.body ?? "no answer")")
        #expect(tokenService.statistics.requests >= 5, "the relay kept asking for tokens")
        #expect(harness.emulator.statistics.updateRequests == 0, "nothing is sent without a token")
        #expect(try await harness.committedOffsets(group: "signer-outage").values.allSatisfy { $0 == nil }, "nothing committed")
        #expect(try await Self.deadLetterTopicIsEmpty(harness), "nothing dead-lettered")

        tokenService.behaviour = .normal
        try await Self.expectEverythingDeliveredAfterwards(fixes, harness, group: "signer-outage", relay: relay, metricsPort: metricsPort)
        await server.shutdown()
        await harness.shutdown()
    }
}
