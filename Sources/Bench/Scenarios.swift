import Egress
import FleetAuth
import FleetEngine
import FleetModel
import FleetSimulator
import Foundation
import InputFormats
import JSON
import Kafka
import Synchronization

/// The benchmark's scenarios. Each adds its figures to the report.
struct Scenarios {
    var environment: BenchEnvironment
    let partitions: Int
    /// How the relay reaches the emulator in the scenarios run through this value.
    var transport: Transport
    var probes: Probes { environment.emulator(transport).probes }
    /// Sections are named with their transport when the run compares several.
    var namesTransport: Bool
    /// Records the relay's profile during the measurements of plans that ask for one.
    var profiler: Profiler?
    /// The relay build these scenarios run: nil for the one benchmarked, or `baseline`, the
    /// build it is compared with (its sections, topics and groups are named apart).
    var build: String?

    func section(_ name: String) -> String {
        let named = build.map { "\(name), \($0)" } ?? name
        return namesTransport ? "\(named) (\(transport.title))" : named
    }

    /// The same scenarios run by the baseline relay binary, with their own sections and names.
    func baseline(_ relayBinary: String) -> Scenarios {
        var scenarios = self
        scenarios.environment = environment.running(relayBinary: relayBinary)
        scenarios.build = "baseline"
        scenarios.profiler = nil
        return scenarios
    }

    /// Topics and consumer groups of a run are its own.
    private var runSuffix: String { transport.rawValue + (build.map { "-" + $0 } ?? "") }

    // MARK: 1. Ceilings

    /// A bare librdkafka consumer (kcat) reading `topic` from `offset` (`beginning`, `end`), each
    /// record's offset a line in `output`.
    private func bareConsumer(topic: String, offset: String, arguments: [String], output: String) throws -> ChildProcess {
        guard let kcat = which("kcat") else { throw BenchError("kcat is missing (make deps installs it)") }
        return try ChildProcess(name: "kcat", executable: kcat, arguments: [
            "-C", "-b", environment.cluster.bootstrapServers, "-t", topic, "-o", offset, "-q", "-f", "%o\n",
        ] + arguments, logPath: output)
    }

    /// Events per second a bare librdkafka consumer (kcat) reads from `topic`, the Kafka side's
    /// limit, and the CPU it spends per event doing so.
    func consumeCeiling(topic: String, events: Int, report: inout Report) async throws -> Double {
        let output = environment.workDirectory + "/kcat.out"
        let childrenCPU = childProcessesCPUSeconds()
        let started = ContinuousClock.now
        let process = try bareConsumer(topic: topic, offset: "beginning", arguments: ["-e"], output: output)
        let status = await process.waitForExit()
        let elapsed = (ContinuousClock.now - started).seconds
        let read = (try? String(contentsOfFile: output, encoding: .utf8))?.split(separator: "\n").count ?? 0
        guard status == 0, read == events else { throw BenchError("kcat read \(read) of \(events) events (exit \(status))") }
        let rate = Double(events) / elapsed
        report.add("ceiling", "bare consumer (kcat) read rate", rate, "events/s")
        // kcat is the one child that ends meanwhile: the emulators run on, the relay has not started.
        report.add("ceiling", "bare consumer (kcat) CPU per event read", (childProcessesCPUSeconds() - childrenCPU) / Double(events) * 1e6, "µs")
        return rate
    }

    /// Update requests per second the emulator answers with pre-minted tokens and 64 requests in flight.
    func emulatorCeiling(requests: Int, vehicles: Int, report: inout Report) async throws -> Double {
        let emulator = environment.emulator(transport)
        let signer = LocalKeySigner(key: environment.key)
        var tokens: [(VehicleIdentity, String)] = []
        for index in 0..<vehicles {
            let vehicle = VehicleIdentity(kind: .vehicle, id: "ceiling-\(index)")
            tokens.append((vehicle, try await signer.mint(for: vehicle).token))
        }
        let client = FleetEngineClient(configuration: .init(baseURL: emulator.url, provider: environment.key.projectId,
                                                            wireProtocol: transport.wireProtocol, maximumInFlight: 64,
                                                            egress: environment.egress))
        let base: Int64 = 1_600_000_000_000  // 2020: older than every scenario's fixes
        let minted = tokens
        let emulatorCPU = emulator.process.cpuSeconds
        let clientCPU = processCPUSeconds()
        let started = ContinuousClock.now
        let accepted = await withTaskGroup(of: Int.self) { group in
            for worker in 0..<64 {
                group.addTask {
                    var accepted = 0
                    for request in stride(from: worker, to: requests, by: 64) {
                        let (vehicle, token) = minted[request % minted.count]
                        let fix = LocationFix(latitude: 37.7, longitude: -122.4, recordedAtMilliseconds: base + Int64(request))
                        let response = await client.send(VehicleLocationUpdate(vehicle: vehicle, lastLocation: fix), token: token)
                        if response.status == 200 { accepted += 1 }
                    }
                    return accepted
                }
            }
            return await group.reduce(0, +)
        }
        let elapsed = (ContinuousClock.now - started).seconds
        let clientCPUPerRequest = (processCPUSeconds() - clientCPU) / Double(requests) * 1e6
        await client.shutdown()
        guard accepted == requests else { throw BenchError("the emulator accepted \(accepted) of \(requests) requests") }
        let rate = Double(requests) / elapsed
        report.add("ceiling", section("emulator update requests (pre-minted tokens)"), rate, "requests/s")
        report.add("ceiling", section("emulator CPU per request"), (emulator.process.cpuSeconds - emulatorCPU) / Double(requests) * 1e6, "µs")
        // The relay's own client with nothing around it: the floor of a request's transport cost.
        report.add("ceiling", section("client CPU per request (the relay's Fleet Engine client alone, in this process)"),
                   clientCPUPerRequest, "µs")
        return rate
    }

    // MARK: 2. Backlog drain

    struct Backlog {
        let topic: String
        let events: Int
        let vehicles: Int
        /// Every vehicle's newest fix is later than this; every older fix is not.
        let newestAfter: Int64
        /// The vehicles' ids start with it, and no other vehicle's does.
        let idPrefix: String
    }

    /// Produces `fixesPerVehicle` fixes 5 s apart for each vehicle, all in the past, to a new
    /// topic (or to an existing one: `createsTopic` false).
    func produceBacklog(topic: String, vehicles: Int, fixesPerVehicle: Int, idPrefix: String = "drain-",
                        encoder: any SimulatedRecordEncoder = SimulatedRecordFormat.native, createsTopic: Bool = true) async throws -> Backlog {
        if createsTopic { try environment.createTopic(topic, partitions: partitions) }
        let producer = try KafkaProducer(configuration: environment.producerConfiguration, logger: environment.logger)
        var fleet = SimulatedFleet(count: vehicles, idPrefix: idPrefix)
        let base = Int64(Date().timeIntervalSince1970 * 1000) - Int64(fixesPerVehicle + 2) * 5000
        try await producer.whileRunning {
            for step in 0..<fixesPerVehicle {
                for index in 0..<vehicles {
                    let time = base + Int64(step) * 5000 + Int64(index % 5000)
                    let record = encoder.record(of: fleet.nextFix(vehicle: index, seconds: 5, recordedAtMilliseconds: time))
                    try await producer.enqueue(topic: topic, key: record.key, value: record.value)
                }
            }
            guard await producer.flush(timeout: .seconds(120)), producer.failedDeliveries == 0 else {
                throw BenchError("producing the backlog failed (\(producer.failedDeliveries) undelivered)")
            }
        }
        return Backlog(topic: topic, events: vehicles * fixesPerVehicle, vehicles: vehicles,
                       newestAfter: base + Int64(fixesPerVehicle - 1) * 5000 - 1, idPrefix: idPrefix)
    }

    /// Returns the relay's CPU seconds for the whole backlog: the transports coalesce
    /// differently (a slower answer lets more fixes gather), so per request they do not
    /// compare the same work.
    @discardableResult
    func backlogDrain(_ backlog: Backlog, consumeCeiling: Double, requestCeiling: Double, report: inout Report) async throws -> Double {
        let group = "bench-drain-\(runSuffix)"
        let before = await probes.emulator()
        let (relay, metricsPort, startup) = try await environment.startRelay(topic: backlog.topic, group: group,
                                                                             transport: transport)
        let emulatorProcess = environment.emulator(transport).process
        let started = ContinuousClock.now
        let cpuAtStart = relay.cpuSeconds
        let emulatorCPUAtStart = emulatorProcess.cpuSeconds
        let requestsAtStart = await probes.metric("fleet_relay_fleet_engine_requests_total", metricsPort: metricsPort)
        let recording = try profiler?.record(pid: relay.pid, name: "drain-\(runSuffix)")
        let delivered = await waitUntil(timeout: .seconds(600)) {
            await probes.emulator(newerThan: backlog.newestAfter, idPrefix: backlog.idPrefix)["vehicles_newer_than"]?.numberValue == Double(backlog.vehicles)
        }
        let held = (ContinuousClock.now - started).seconds
        let committed = try await waitUntil(timeout: .seconds(120)) {
            try await probes.lag(topic: backlog.topic, partitions: partitions, group: group) == 0
        }
        let elapsed = (ContinuousClock.now - started).seconds
        let cpu = relay.cpuSeconds - cpuAtStart
        let emulatorCPU = emulatorProcess.cpuSeconds - emulatorCPUAtStart
        let relayRequests = await probes.metric("fleet_relay_fleet_engine_requests_total", metricsPort: metricsPort) - requestsAtStart
        if let profiler, let recording {
            say("profile of the relay during the \(section("backlog drain")) (perf's own cost included in this run's CPU figures):\n"
                + (try await profiler.finish(recording)) + "\n(in \(profiler.directory)/\(recording.name).*)")
        }
        let peak = relay.peakRSSMegabytes
        // Token counters are refreshed every 5 s.
        _ = await waitUntil(timeout: .seconds(12)) {
            await probes.metric("fleet_relay_tokens_minted_total", metricsPort: metricsPort) >= Double(backlog.vehicles)
        }
        let minted = await probes.metric("fleet_relay_tokens_minted_total", metricsPort: metricsPort)
        let unsent = await probes.finishedUnsent(metricsPort: metricsPort)
        _ = await relay.stop()
        guard delivered, committed else { throw BenchError("the backlog was not drained within 10 minutes") }
        let after = await probes.emulator()
        let requests = delta(after, before, "update_requests")
        let lost = Double(backlog.events) - delta(after, before, "distinct_fixes_received") - unsent
        let eventRate = Double(backlog.events) / elapsed
        let section = section("backlog drain")
        let cpuPerRequest = cpu / max(relayRequests, 1) * 1e6
        report.add(section, "relay start until the group is joined", startup.seconds, "s")
        report.add(section, "drain time (joined → newest fixes held, offsets committed)", elapsed, "s")
        report.add(section, "of which until every vehicle's newest fix was held", held, "s")
        report.add(section, "events/s", eventRate, "events/s", ratio: eventRate / consumeCeiling, of: "bare consumer")
        report.add(section, "requests/s", requests / elapsed, "requests/s", ratio: requests / elapsed / requestCeiling,
                   of: "emulator ceiling")
        report.add(section, "coalescing (events per request)", Double(backlog.events) / requests, "events/request")
        report.add(section, "relay CPU", cpu, "CPU s", ratio: cpu / elapsed, of: "one core")
        report.add(section, "relay CPU per event (tokens, live reads and updates included)", cpu / Double(backlog.events) * 1e6, "µs")
        report.add(section, "relay CPU per Fleet Engine request", cpuPerRequest, "µs")
        // The emulator stands in for Fleet Engine on the relay's own cores: when the two together
        // fill the machine, the drain's rate is their CPU's, not Kafka's or the relay's alone.
        report.add(section, "emulator CPU (Fleet Engine's stand-in, on the same cores)", emulatorCPU, "CPU s",
                   ratio: emulatorCPU / (cpu + emulatorCPU), of: "relay and emulator")
        let cores = Double(ProcessInfo.processInfo.activeProcessorCount)
        report.add(section, "relay and emulator CPU together", (cpu + emulatorCPU) / elapsed, "cores",
                   ratio: (cpu + emulatorCPU) / elapsed / cores, of: "the machine's \(Int(cores)) cores")
        Self.reportBytesOnTheWire(section, from: before, to: after, report: &report)
        report.add(section, "relay peak RSS", peak, "MB")
        report.add(section, "tokens minted", minted, "tokens", ratio: minted / Double(backlog.vehicles), of: "vehicles")
        report.add(section, "events not sent for a counted reason (past the pastLocations cap, stale)", unsent, "events")
        report.add(section, "events lost", lost, "events")
        return cpu
    }

    // MARK: 3, 4 and 5. Steady states, and tokens

    /// A steady-state run: a cold start (one fix per vehicle), then `rate` events/s over the
    /// fleet measured for `seconds`; latency counts only fixes located during the measurement.
    struct SteadyPlan {
        let section: String
        let topic: String
        let vehicles: Int
        let rate: Int
        let seconds: Int
        let warmupLimit: Int
        /// Report the tokens minted (once per bench run).
        var reportsTokens = false
        /// Profile the relay during the measurement (with `--profile`), under this name and the transport's.
        var profileName: String?
    }

    /// CPU seconds of one vehicle token's RS256 signature here, measured in this process with the
    /// relay's own signer: the floor of a cold vehicle's cost.
    func signatureCost(tokens: Int = 2_000) async throws -> Double {
        let signer = LocalKeySigner(key: environment.key)
        let started = processCPUSeconds()
        for index in 0..<tokens { _ = try await signer.mint(for: VehicleIdentity(kind: .vehicle, id: "floor-\(index)")) }
        return (processCPUSeconds() - started) / Double(tokens)
    }

    /// Returns the relay's CPU per Fleet Engine request in µs.
    @discardableResult
    func steadyState(_ plan: SteadyPlan, consumeCeiling: Double, requestCeiling: Double, report: inout Report) async throws -> Double {
        // As long for either build: a longer topic and vehicle ids cost a little more per event.
        let topic = plan.topic + "-" + transport.rawValue + (build == nil ? "-a" : "-b")
        let (group, section, vehicles, rate, seconds, warmupLimit) =
            (topic, section(plan.section), plan.vehicles, plan.rate, plan.seconds, plan.warmupLimit)
        try environment.createTopic(topic, partitions: partitions)
        let before = await probes.emulator()
        let (relay, metricsPort, _) = try await environment.startRelay(topic: topic, group: group, transport: transport)

        // Cold start: one fix per vehicle, each needing its first token. Measured on its
        // own: under full load the mock cluster's small retention would drop the backlog.
        // Every fix of the round counts, whenever the simulator stamped it.
        await probes.resetLatency(locatedAfter: 0)
        var coldCPUBefore = relay.cpuSeconds
        var warmupStarted = ContinuousClock.now
        // Ends with a character no topic has: the emulator counts vehicles by prefix, and no
        // run's vehicles may count as another's.
        let idPrefix = topic + "."
        let stamped = try await produceRound(topic: topic, vehicles: vehicles, idPrefix: idPrefix) {
            coldCPUBefore = relay.cpuSeconds
            warmupStarted = .now
        }
        // Delivered is what the emulator holds; the commit that follows waits for the relay's
        // commit interval, which says nothing about the cost of a cold vehicle.
        let delivered = await waitUntil(timeout: .seconds(warmupLimit)) {
            await probes.emulator(newerThan: stamped - 1, idPrefix: idPrefix)["vehicles_newer_than"]?.numberValue == Double(vehicles)
        }
        let warmup = (ContinuousClock.now - warmupStarted).seconds
        let warmedUp = try await waitUntil(timeout: .seconds(warmupLimit), interval: .milliseconds(500)) {
            try await probes.lag(topic: topic, partitions: partitions, group: group) == 0
        }
        guard delivered, warmedUp else {
            _ = await relay.stop()
            throw BenchError("cold start: \(vehicles) vehicles' first fixes not delivered within \(warmupLimit) s")
        }
        let coldCPU = relay.cpuSeconds - coldCPUBefore
        let coldLatency = await probes.emulator()["latency_ms"]
        let signature = try await signatureCost()
        report.add(section, "cold start: first fix of every vehicle delivered (one token each)", warmup, "s")
        report.add(section, "cold start rate", Double(vehicles) / warmup, "vehicles/s")
        report.add(section, "cold start latency p50 (event time → emulator)", coldLatency?["p50"]?.numberValue ?? -1, "ms")
        report.add(section, "cold start latency p99", coldLatency?["p99"]?.numberValue ?? -1, "ms")
        report.add(section, "cold start relay CPU", coldCPU, "CPU s", ratio: coldCPU / warmup, of: "one core")
        report.add(section, "cold start relay CPU per vehicle (token, live read, update)", coldCPU / Double(vehicles) * 1000, "ms",
                   ratio: coldCPU / Double(vehicles) / signature, of: "one RS256 signature")
        report.add(section, "one RS256 signature with the system libcrypto", signature * 1000, "ms")
        report.add(section, "relay RSS after the cold start", relay.rssMegabytes, "MB")

        let feeder = SteadyFeeder(environment: environment, topic: topic, vehicles: vehicles, rate: rate, idPrefix: idPrefix)
        let profiling = plan.profileName.flatMap { name in profiler.map { ($0, "\(name)-\(transport.rawValue)") } }
        var recording: Profiler.Recording?
        var bareConsumer: Double?
        let (measured, fed) = try await feeder.feeding {
            try await Task.sleep(for: .seconds(5))  // one full round of the fleet before measuring
            await probes.resetLatency()
            let lagAtStart = try await probes.lag(topic: topic, partitions: partitions, group: group)
            let atStart = await probes.emulator()
            let producedAtStart = feeder.produced
            let cpuAtStart = relay.cpuSeconds
            let requestsAtStart = await probes.metric("fleet_relay_fleet_engine_requests_total", metricsPort: metricsPort)
            let measureStarted = ContinuousClock.now
            if let (profiler, name) = profiling { recording = try profiler.record(pid: relay.pid, name: name) }
            try await Task.sleep(for: .seconds(seconds))
            let measurement = SteadyMeasurement(
                elapsed: (ContinuousClock.now - measureStarted).seconds,
                cpu: relay.cpuSeconds - cpuAtStart,
                relayRequests: await probes.metric("fleet_relay_fleet_engine_requests_total", metricsPort: metricsPort) - requestsAtStart,
                produced: Double(feeder.produced - producedAtStart),
                lagAtStart: lagAtStart,
                lagAtEnd: try await probes.lag(topic: topic, partitions: partitions, group: group),
                atStart: atStart,
                atEnd: await probes.emulator(),
                rss: relay.rssMegabytes,
                peakRSS: relay.peakRSSMegabytes)
            // After the relay's window, so that it does not share the cores with the relay's measurement.
            if build == nil { bareConsumer = try await bareConsumerCPUPerEvent(topic: topic, feeder: feeder) }
            return measurement
        }
        let totalProduced = fed + vehicles
        if let bareConsumer {
            // What reading the stream costs any librdkafka consumer at this pace, measured in the
            // same run: the part of the relay's CPU per request that is Kafka's, not the relay's.
            let relayPerRequest = measured.cpu / max(measured.relayRequests, 1)
            report.add(section, "bare consumer (kcat) CPU per event at this stream's pace, same fetch wait", bareConsumer * 1e6, "µs",
                       ratio: bareConsumer / relayPerRequest, of: "the relay's CPU per request")
        }
        if let (profiler, _) = profiling, let recording {
            say("profile of the relay during the \(section) (perf's own cost included in this run's CPU figures):\n"
                + (try await profiler.finish(recording)) + "\n(in \(profiler.directory)/\(recording.name).*)")
        }

        // Drain what is left, then account for every event: what is still uncommitted
        // in Kafka is not lost (a restart reads it again).
        let drainStarted = ContinuousClock.now
        let caughtUp = try await waitUntil(timeout: .seconds(180), interval: .seconds(1)) {
            try await probes.lag(topic: topic, partitions: partitions, group: group) == 0
        }
        let drainTime = (ContinuousClock.now - drainStarted).seconds
        let restingCPU = caughtUp ? try await cpuAtRest(relay) : nil
        let minted = await probes.metric("fleet_relay_tokens_minted_total", metricsPort: metricsPort)
        let unsent = await probes.finishedUnsent(metricsPort: metricsPort)
        _ = await relay.stop()
        // Read after the graceful stop, which commits everything finished: what is left was not
        // finished. Some of it may have been delivered already (abandoned in flight at the stop):
        // at-least-once, counted in both, so the difference is floored at zero.
        let left = try await probes.lag(topic: topic, partitions: partitions, group: group)
        let inKafka = try await probes.recordsInKafka(topic: topic, partitions: partitions, group: group)
        let after = await probes.emulator()
        let dropped = Double(RetentionLoss.skippedOffsets(inLog: relay.logPath))
        let lost = max(0, Double(inKafka) - delta(after, before, "distinct_fixes_received") - unsent - dropped - Double(left))
        let latency = measured.atEnd["latency_ms"]
        let producedRate = measured.produced / measured.elapsed
        report.add(section, "events produced", producedRate, "events/s", ratio: producedRate / consumeCeiling, of: "bare consumer")
        let requestRate = delta(measured.atEnd, measured.atStart, "update_requests") / measured.elapsed
        report.add(section, "update requests", requestRate, "requests/s", ratio: requestRate / requestCeiling, of: "emulator ceiling")
        report.add(section, "latency p50 (event time → emulator)", latency?["p50"]?.numberValue ?? -1, "ms")
        report.add(section, "latency p99", latency?["p99"]?.numberValue ?? -1, "ms")
        report.add(section, "latency max", latency?["max"]?.numberValue ?? -1, "ms")
        report.add(section, "consumer lag at start of measurement", Double(measured.lagAtStart), "events")
        report.add(section, "consumer lag at end", Double(measured.lagAtEnd), "events")
        report.add(section, "relay CPU share", measured.cpu / measured.elapsed, "cores", ratio: measured.cpu / measured.elapsed / 2, of: "the machine's 2 cores")
        let cpuPerRequest = measured.cpu / max(measured.relayRequests, 1) * 1e6
        report.add(section, "relay CPU per Fleet Engine request", cpuPerRequest, "µs")
        Self.reportBytesOnTheWire(section, from: measured.atStart, to: measured.atEnd, report: &report)
        report.add(section, "events per update request", measured.produced / max(requestRate * measured.elapsed, 1), "events/request")
        report.add(section, "relay RSS at end", measured.rss, "MB")
        report.add(section, "relay peak RSS", measured.peakRSS, "MB")
        report.add(section, "events not sent for a counted reason", unsent, "events")
        report.add(section, "events deleted by the mock cluster's retention before they were read", dropped, "events")
        report.add(section, "after the producer stopped: time to drain the lag", drainTime, "s")
        report.add(section, "events still uncommitted in Kafka then (not lost)", Double(left), "events")
        if let restingCPU {
            report.add(section, "relay CPU at rest (caught up, nothing more to read)", restingCPU * 1000, "ms per s",
                       ratio: restingCPU / max(measured.cpu / measured.elapsed, 1e-9), of: "the CPU per second of the measured stream")
        }
        report.add(section, "events the producer counted that Kafka does not hold", Double(totalProduced) - Double(inKafka), "events")
        report.add(section, "events lost (of those Kafka holds)", lost, "events")
        report.add(section, "fixes received, each time it arrived", delta(after, before, "locations_received"), "fixes",
                   ratio: delta(after, before, "locations_received") / max(delta(after, before, "distinct_fixes_received"), 1),
                   of: "distinct fixes received")
        if plan.reportsTokens {
            report.add("tokens", "tokens minted during steady state", minted, "tokens", ratio: minted / Double(vehicles), of: "vehicles")
            report.add("tokens", "events per token", Double(totalProduced) / max(minted, 1), "events/token")
        }
        return cpuPerRequest
    }

    /// CPU seconds per event of a bare librdkafka consumer (kcat) reading `topic` from its end
    /// while the feeder keeps the stream going, with the relay's fetch wait: what taking the
    /// stream's events out of Kafka costs a consumer at that pace (its fetches, wakeups and
    /// librdkafka's threads), the part of a warm request's CPU the relay cannot cut.
    func bareConsumerCPUPerEvent(topic: String, feeder: SteadyFeeder, seconds: Int = 10) async throws -> Double {
        let process = try bareConsumer(
            topic: topic, offset: "end",
            arguments: ["-X", "fetch.wait.max.ms=\(KafkaConsumer.defaultProperties["fetch.wait.max.ms"] ?? "100")"],
            output: environment.workDirectory + "/kcat-steady.out")
        try await Task.sleep(for: .seconds(2))  // its connections, metadata and first fetches left out
        let cpuAtStart = process.liveThreadsCPUSeconds
        let producedAtStart = feeder.produced
        try await Task.sleep(for: .seconds(seconds))
        let cpu = process.threadsCPUSeconds(since: cpuAtStart)
        let events = feeder.produced - producedAtStart
        _ = await process.kill()
        return cpu / Double(max(events, 1))
    }

    /// CPU seconds per second of a relay with nothing to read or send, over ten seconds: its
    /// timers and librdkafka's threads. At a warm stream's rate this part of each request's CPU
    /// does not depend on the requests.
    private func cpuAtRest(_ relay: ChildProcess) async throws -> Double {
        let (cpuAtStart, started) = (relay.liveThreadsCPUSeconds, ContinuousClock.now)
        try await Task.sleep(for: .seconds(10))
        return relay.threadsCPUSeconds(since: cpuAtStart) / (ContinuousClock.now - started).seconds
    }

    func delta(_ after: JSONValue, _ before: JSONValue, _ field: String) -> Double {
        (after[field]?.numberValue ?? 0) - (before[field]?.numberValue ?? 0)
    }
}

extension Scenarios {
    /// One fix per vehicle, as fast as the producer goes, all stamped with the returned time
    /// (milliseconds since the epoch). `starting` runs once the first of them is in Kafka: a
    /// producer's first delivery to a topic sometimes waits about a second (the round's flush
    /// took 1.05 s instead of 0.03–0.07 s), which is not the relay's time.
    func produceRound(topic: String, vehicles: Int, idPrefix: String, starting: () -> Void) async throws -> Int64 {
        let producer = try KafkaProducer(configuration: environment.producerConfiguration, logger: environment.logger)
        var fleet = SimulatedFleet(count: vehicles, idPrefix: idPrefix, seed: 7)
        let now = Int64(Date().timeIntervalSince1970 * 1000) - 10_000
        try await producer.whileRunning {
            for index in 0..<vehicles {
                let event = fleet.nextEvent(vehicle: index, seconds: 5, recordedAtMilliseconds: now)
                let (key, value) = (Array(fleet.vehicles[index].id.utf8), Array(event.utf8))
                guard index == 0 else {
                    try await producer.enqueue(topic: topic, key: key, value: value)
                    continue
                }
                try await producer.send(topic: topic, key: key, value: value)
                starting()
            }
            guard await producer.flush(timeout: .seconds(120)), producer.failedDeliveries == 0 else {
                throw BenchError("producing the first round failed (\(producer.failedDeliveries) undelivered)")
            }
        }
        return now
    }
}

/// What a steady state's measuring window saw, read while the feeder runs.
struct SteadyMeasurement: Sendable {
    let elapsed: Double
    let cpu: Double
    let relayRequests: Double
    let produced: Double
    let lagAtStart: Int64
    let lagAtEnd: Int64
    let atStart: JSONValue
    let atEnd: JSONValue
    let rss: Double
    let peakRSS: Double
}

/// Produces events at a steady rate over a fleet, each with the current time.
final class SteadyFeeder: Sendable {
    let environment: BenchEnvironment
    let topic: String
    let vehicles: Int
    let rate: Int
    let idPrefix: String
    private let count = Mutex(0)

    init(environment: BenchEnvironment, topic: String, vehicles: Int, rate: Int, idPrefix: String) {
        self.idPrefix = idPrefix
        self.environment = environment
        self.topic = topic
        self.vehicles = vehicles
        self.rate = rate
    }

    var produced: Int { count.withLock { $0 } }

    /// Feeds as a child task while `measure` runs, then stops: `measure`'s result and the
    /// events produced in all (flushed).
    func feeding<Measured: Sendable>(while measure: () async throws -> Measured) async throws -> (Measured, produced: Int) {
        try await withThrowingTaskGroup(of: Int.self) { group in
            group.addTask { try await self.run() }
            let measured = try await measure()  // a throw cancels the feeder with the group
            group.cancelAll()
            return (measured, try await group.next() ?? 0)
        }
    }

    /// Runs until cancelled; returns the events produced (all flushed).
    private func run() async throws -> Int {
        let producer = try KafkaProducer(configuration: environment.producerConfiguration, logger: environment.logger)
        var fleet = SimulatedFleet(count: vehicles, idPrefix: idPrefix)
        let started = ContinuousClock.now
        var produced = 0
        var index = 0
        try await producer.whileRunning(flushTimeout: .seconds(60)) {
            while !Task.isCancelled {
                let due = Int((ContinuousClock.now - started).seconds * Double(rate))
                let now = Int64(Date().timeIntervalSince1970 * 1000)
                while produced < due {
                    let event = fleet.nextEvent(vehicle: index, seconds: Double(vehicles) / Double(rate), recordedAtMilliseconds: now)
                    try await producer.enqueue(topic: topic, key: Array(fleet.vehicles[index].id.utf8), value: Array(event.utf8))
                    produced += 1
                    index = (index + 1) % vehicles
                }
                count.withLock { $0 = produced }
                try? await Task.sleep(for: .milliseconds(10))
            }
        }
        return produced - producer.failedDeliveries
    }
}

func which(_ tool: String) -> String? {
    (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":")
        .map { "\($0)/\(tool)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// The mock cluster keeps about 5 MiB per partition: a consumer lagging further
/// finds its next offset deleted, and librdkafka logs the jump it makes.
enum RetentionLoss {
    /// Offsets skipped by "offset reset (at offset X, …) to … offset Y" lines in a relay's log.
    static func skippedOffsets(inLog path: String?) -> Int64 {
        guard let path, let log = try? String(contentsOfFile: path, encoding: .utf8) else { return 0 }
        var skipped: Int64 = 0
        for line in log.split(separator: "\n") where line.contains("offset reset (at offset ") {
            guard let from = number(after: "offset reset (at offset ", in: line),
                let to = number(after: "BEGINNING offset ", in: line)
            else { continue }
            skipped += max(0, to - from)
        }
        return skipped
    }

    private static func number(after marker: String, in line: Substring) -> Int64? {
        guard let range = line.range(of: marker) else { return nil }
        return Int64(line[range.upperBound...].prefix { $0.isNumber })
    }
}

// MARK: 5. Input formats

extension Scenarios {
    /// One input format of the input-format stage: how its records are written and read.
    struct InputFormatCase {
        let name: String
        let encoder: any SimulatedRecordEncoder
        let relayArguments: [String]
        /// Held to the mapping ceiling against the native decoder (the others are reported).
        let ceilinged: Bool
    }

    static let mappingCeiling = 1.3

    /// The same backlog in each format, drained by a fresh relay: relay CPU per event, each
    /// against the native decoder's. The native event through the native mapping isolates the
    /// mapping's cost; Traccar's records are larger JSON; Avro adds the registry's framing.
    func inputFormats(vehicles: Int, fixesPerVehicle: Int, report: inout Report) async throws {
        let registry = SchemaRegistryClient(baseURL: environment.emulator(transport).url, credentials: nil, egress: environment.egress)
        let avroId = try await registry.register(subject: "bench-format-avro-value", schema: AvroFixEncoder.schema, type: "AVRO")
        let mappingFile = environment.workDirectory + "/native-mapping.yaml"
        try BuiltInFormat.native.mappingText.write(toFile: mappingFile, atomically: true, encoding: .utf8)
        let cases = [
            InputFormatCase(name: "native", encoder: SimulatedRecordFormat.native, relayArguments: [], ceilinged: false),
            InputFormatCase(name: "mapped", encoder: SimulatedRecordFormat.native, relayArguments: ["--input-mapping", mappingFile], ceilinged: true),
            InputFormatCase(name: "traccar", encoder: SimulatedRecordFormat.traccar, relayArguments: ["--input-format", "traccar"], ceilinged: false),
            InputFormatCase(name: "avro", encoder: AvroFixEncoder(schemaId: avroId),
                            relayArguments: ["--schema-registry", environment.emulator(transport).url], ceilinged: true),
        ]
        var nativeCost: Double?
        let section = "input formats"
        for format in cases {
            let backlog = try await produceBacklog(topic: "bench-format-\(format.name)", vehicles: vehicles,
                                                   fixesPerVehicle: fixesPerVehicle, idPrefix: "format-\(format.name)-",
                                                   encoder: format.encoder)
            let microseconds = try await drainCost(backlog, group: "bench-format-\(format.name)", arguments: format.relayArguments) * 1e6
                / Double(backlog.events)
            let title = "relay CPU per event, \(format.name) (\(format.relayArguments.first ?? "native decoder"))"
            if let nativeCost {
                let ratio = microseconds / nativeCost
                report.add(section, title, microseconds, "µs", ratio: format.ceilinged ? ratio / Self.mappingCeiling : ratio,
                           of: format.ceilinged ? "the \(Self.mappingCeiling)× ceiling over native" : "native")
            } else {
                nativeCost = microseconds
                report.add(section, title, microseconds, "µs")
            }
        }
    }

    /// Relay CPU seconds to drain `backlog` (every vehicle's newest fix held, offsets committed).
    private func drainCost(_ backlog: Backlog, group: String, arguments: [String]) async throws -> Double {
        let (relay, metricsPort, _) = try await environment.startRelay(topic: backlog.topic, group: group, transport: transport,
                                                                       extraArguments: arguments)
        let cpuAtStart = relay.cpuSeconds
        let delivered = await waitUntil(timeout: .seconds(600)) {
            await probes.emulator(newerThan: backlog.newestAfter, idPrefix: backlog.idPrefix)["vehicles_newer_than"]?.numberValue == Double(backlog.vehicles)
        }
        let committed = try await waitUntil(timeout: .seconds(120)) {
            try await probes.lag(topic: backlog.topic, partitions: partitions, group: group) == 0
        }
        let cpu = relay.cpuSeconds - cpuAtStart
        let deadLettered = await probes.metric("fleet_relay_dead_letters_total", metricsPort: metricsPort)
        _ = await relay.stop()
        guard delivered, committed else { throw BenchError("the \(group) backlog was not drained within 10 minutes") }
        guard deadLettered == 0 else { throw BenchError("\(group): \(Int(deadLettered)) records dead-lettered (see its relay log)") }
        return cpu
    }

    /// Bytes the emulator's connections carried per request (reads and updates), TLS records
    /// included: what the protocol costs on the wire.
    static func reportBytesOnTheWire(_ section: String, from before: JSONValue, to after: JSONValue, report: inout Report) {
        func delta(_ field: String) -> Double { (after[field]?.numberValue ?? 0) - (before[field]?.numberValue ?? 0) }
        let requests = max(delta("requests"), 1)
        report.add(section, "bytes on the wire per request, relay → Fleet Engine", delta("bytes_received") / requests, "bytes")
        report.add(section, "bytes on the wire per request, Fleet Engine → relay", delta("bytes_sent") / requests, "bytes")
    }
}
