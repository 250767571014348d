import ArgumentParser
import Foundation
import Logging

/// `make bench`: the relay's throughput, latency, CPU and memory on this machine,
/// each figure next to its ratio to the same run's ceiling.
@main
struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-relay-bench",
        abstract: "Benchmark the relay (release build) against the mock Kafka cluster and the emulator, each its own process.")

    @Option(help: "The fleet-relay binary to benchmark.")
    var relayBinary = ".build/release/fleet-relay"

    @Option(help: "The fleet-relay-dev binary that runs the emulator (and with it the latency measurement).")
    var emulatorBinary = ".build/release/fleet-relay-dev"

    @Option(help: "Where the results go as JSON.")
    var output = "bench/results.json"

    @Option(help: "Topic partitions (the mock cluster keeps about 100,000 messages or 5 MiB per partition).")
    var partitions = 16

    @Option(help: "Vehicles in the backlog-drain scenario.")
    var drainVehicles = 1000

    @Option(help: "Fixes per vehicle in the backlog.")
    var drainFixesPerVehicle = 100

    @Option(help: "Backlog drains per transport (and per build, with a baseline), each of a fresh backlog, the builds taking turns at going first (an even number balances the order); the table reports each figure's median. One drain's CPU per event varies by about ±10 % from run to run.")
    var drainRounds = 1

    @Option(help: "Vehicles in each input format's backlog.")
    var formatVehicles = 1000

    @Option(help: "Fixes per vehicle in each input format's backlog.")
    var formatFixesPerVehicle = 50

    @Option(help: "Vehicles in the warm steady scenario, a load the relay keeps up with (each reports every vehicles/rate seconds).")
    var warmVehicles = 5_000

    @Option(help: "Events per second in the warm steady scenario.")
    var warmRate = 1_000

    @Option(help: "Warm steady states per transport (and per build, with a baseline), each on a fresh topic, the builds taking turns at going first (an even number balances the order); the table reports each figure's median. One run's CPU per request varies by about ±15 %.")
    var warmRounds = 1

    @Option(help: "Vehicles in the overload steady-state scenario (each reports every vehicles/rate seconds).")
    var steadyVehicles = 100_000

    @Option(help: "Events per second in the overload steady-state scenario.")
    var steadyRate = 20_000

    @Option(help: "Seconds each steady state is measured, after its cold start.")
    var steadySeconds = 60

    @Option(help: "Longest steady-state warm-up in seconds.")
    var warmupLimit = 240

    @Option(help: "Vehicles in the replay scenario.")
    var replayVehicles = 10_000

    @Option(help: "Fixes per vehicle in the replay scenario (each vehicle's history is sent whole, in requests of up to 101).")
    var replayFixesPerVehicle = 60

    @Option(help: "Vehicles in the quota scenario (two fixes each).")
    var quotaVehicles = 20_000

    @Option(help: "The emulator's project quota in the quota scenario, requests per second.")
    var quota = 800.0

    @Option(help: "Update requests sent to measure the emulator's ceiling.")
    var ceilingRequests = 20_000

    @Option(name: .customLong("relay-arg"), parsing: .unconditionalSingleValue,
            help: "An extra argument for the relay's run command, e.g. --relay-arg=--max-pending-records=300000 (repeatable).")
    var relayArguments: [String] = []

    @Option(help: "Stop after this scenario: ceilings, drain, warm, steady, formats, replay or quota (default: all).")
    var until: Stage = .quota

    @Option(help: "Skip the scenarios before this one (after the ceilings): drain, warm, steady, formats, replay or quota.")
    var from: Stage = .ceilings

    @Option(help: "A relay binary to compare this one with, such as the build before a change. The backlog drain and the warm steady state then also run with it, in this run, the builds taking turns at going first (see --drain-rounds and --warm-rounds); the table adds this build's figures as ratios to the baseline's.")
    var baselineRelayBinary: String?

    @Option(help: "Record the relay's CPU profile with Linux perf during each backlog drain and warm steady state into this directory, and print its top symbols and threads. Profiled runs' CPU figures include perf's cost: compare them with each other only.")
    var profile: String?

    @Option(name: .customLong("transport"),
            help: "How the relay reaches the emulator: https (REST, HTTPS, HTTP/2 negotiated), grpc (gRPC over HTTPS and HTTP/2) and plain (REST over HTTP/1.1) (repeatable; default all three). The drain and warm steady state run once per transport, the quota scenario once per HTTPS transport; the overload, formats and replay run on the first.")
    var transports: [Transport] = [.https, .grpc, .plain]

    /// HTTPS's relay CPU per request at most this many times plain HTTP/1.1's.
    static let httpsOverheadCeiling = 1.5
    /// gRPC's relay CPU per request at most this many times REST's, both over HTTPS + HTTP/2.
    static let grpcOverheadCeiling = 1.1

    /// The figures compared with the baseline build's, and whether less is better.
    static let drainComparisons = [("events/s", false), ("relay CPU per event (tokens, live reads and updates included)", true),
                                   ("relay peak RSS", true)]
    static let warmComparisons = [("relay CPU per Fleet Engine request", true), ("latency p50 (event time → emulator)", true),
                                  ("latency p99", true), ("cold start: first fix of every vehicle delivered (one token each)", true),
                                  ("cold start relay CPU per vehicle (token, live read, update)", true),
                                  ("relay RSS after the cold start", true), ("relay peak RSS", true),
                                  ("relay CPU at rest (caught up, nothing more to read)", true)]

    /// This build's figures of a scenario as ratios to the baseline build's, from the same run.
    private func compareWithBaseline(_ run: Scenarios, _ scenario: String, _ figures: [(String, Bool)], _ report: inout Report) {
        let (section, baselineSection) = (run.section(scenario), run.baseline(relayBinary).section(scenario))
        for (figure, lessIsBetter) in figures {
            guard let value = report.value(of: figure, in: section), let baseline = report.value(of: figure, in: baselineSection),
                  baseline > 0 else { continue }
            report.add("this build ÷ baseline", "\(section): \(figure) (\(lessIsBetter ? "less" : "more") is better)",
                       value / baseline, "×")
        }
    }

    /// The backlog drains, `drainRounds` of them per transport, each of a fresh backlog: the
    /// baseline drains one of its own vehicles, named as long (the emulator would find the
    /// other's fixes already held, and send nothing), just before this build's in odd rounds
    /// and just after it in even ones. No vehicle id prefix is the start of another's: a drain
    /// is over when every vehicle of its prefix holds its newest fix. Returns this build's
    /// median relay CPU per transport.
    private func drainRounds(_ runs: [Scenarios], first: Scenarios.Backlog, consumeCeiling: Double, requestCeilings: [Double],
                             report: inout Report) async throws -> [Transport: Double] {
        var rounds: [Report] = []
        var cpu: [Transport: [Double]] = [:]
        for round in 1...drainRounds {
            let suffix = round == 1 ? "" : "-\(round)"
            let backlog = round == 1 ? first : try await runs[0].produceBacklog(
                topic: "bench-drain\(suffix)", vehicles: drainVehicles, fixesPerVehicle: drainFixesPerVehicle, idPrefix: "drain\(suffix)-")
            // Topic and vehicle ids as long as this build's: a name of more than 15 bytes is a
            // string of its own on the heap, which every record's copies retain and release.
            let baselineBacklog = baselineRelayBinary == nil ? nil : try await runs[0].produceBacklog(
                topic: "bench-older\(suffix)", vehicles: drainVehicles, fixesPerVehicle: drainFixesPerVehicle,
                idPrefix: "older\(suffix)-")
            var roundReport = Report()
            // The second drain of a round meets an emulator holding the first's vehicles too:
            // the builds take turns going first, so that the order favours neither.
            let baselineFirst = round % 2 == 1
            for (run, ceiling) in zip(runs, requestCeilings) {
                let title = "2. backlog drain over \(run.transport.title)" + (drainRounds > 1 ? ", round \(round) of \(drainRounds)" : "")
                let drainBaseline = { (report: inout Report) async throws in
                    guard let baselineRelayBinary, let baselineBacklog else { return }
                    say(title + ", baseline build")
                    try await run.baseline(baselineRelayBinary).backlogDrain(baselineBacklog, consumeCeiling: consumeCeiling,
                                                                             requestCeiling: ceiling, report: &report)
                }
                if baselineFirst { try await drainBaseline(&roundReport) }
                say(title)
                cpu[run.transport, default: []].append(
                    try await run.backlogDrain(backlog, consumeCeiling: consumeCeiling, requestCeiling: ceiling, report: &roundReport))
                if !baselineFirst { try await drainBaseline(&roundReport) }
            }
            rounds.append(roundReport)
        }
        reportMedians(of: rounds, "backlog drain", Self.drainComparisons, runs,
                      note: "Backlog drain figures are medians of \(drainRounds) drains per build and transport.", &report)
        return cpu.mapValues(Report.median)
    }

    /// The rounds' figures as their medians (with a note saying so when there were several),
    /// and this build's as ratios to the baseline's.
    private func reportMedians(of rounds: [Report], _ scenario: String, _ comparisons: [(String, Bool)], _ runs: [Scenarios],
                               note: String, _ report: inout Report) {
        report.addMedians(of: rounds)
        if rounds.count > 1 { report.notes.append(note) }
        for run in runs where baselineRelayBinary != nil { compareWithBaseline(run, scenario, comparisons, &report) }
    }

    /// The warm steady states, `warmRounds` of them per transport, each on a topic of its own
    /// (named as long for either build): the baseline runs just before this build in odd
    /// rounds and just after it in even ones. Returns this build's median relay CPU per request.
    private func warmRounds(_ runs: [Scenarios], consumeCeiling: Double, requestCeilings: [Double],
                            report: inout Report) async throws -> [Transport: Double] {
        var rounds: [Report] = []
        var cpu: [Transport: [Double]] = [:]
        for round in 1...warmRounds {
            var roundReport = Report()
            let baselineFirst = round % 2 == 1
            for (run, ceiling) in zip(runs, requestCeilings) {
                let counted = warmRounds > 1 ? ", round \(round) of \(warmRounds)" : ""
                say("3. warm steady state over \(run.transport.title)\(counted): \(warmRate) events/s over \(warmVehicles) vehicles, measured for \(steadySeconds) s after the cold start")
                // No round's topic is the start of another's: the emulator counts vehicles by prefix.
                let plan = Scenarios.SteadyPlan(section: "warm steady state", topic: round == 1 ? "bench-warm" : "bench-warm\(round)",
                                                vehicles: warmVehicles, rate: warmRate, seconds: steadySeconds, warmupLimit: warmupLimit,
                                                profileName: round == 1 ? "warm" : "warm\(round)")
                let runBaseline = { (report: inout Report) async throws in
                    guard let baselineRelayBinary else { return }
                    say("   baseline build")
                    try await run.baseline(baselineRelayBinary).steadyState(plan, consumeCeiling: consumeCeiling, requestCeiling: ceiling,
                                                                            report: &report)
                }
                if baselineFirst { try await runBaseline(&roundReport) }
                if baselineRelayBinary != nil { say("   this build") }
                cpu[run.transport, default: []].append(
                    try await run.steadyState(plan, consumeCeiling: consumeCeiling, requestCeiling: ceiling, report: &roundReport))
                if !baselineFirst { try await runBaseline(&roundReport) }
            }
            rounds.append(roundReport)
        }
        reportMedians(of: rounds, "warm steady state", Self.warmComparisons, runs,
                      note: "Warm steady-state figures are medians of \(warmRounds) runs per build and transport.", &report)
        return cpu.mapValues(Report.median)
    }

    func validate() throws {
        guard drainRounds >= 1 else { throw ValidationError("--drain-rounds must be at least 1") }
        guard warmRounds >= 1 else { throw ValidationError("--warm-rounds must be at least 1") }
    }

    enum Stage: String, ExpressibleByArgument, Comparable, CaseIterable {
        case ceilings, drain, warm, steady, formats, replay, quota
        static func < (a: Stage, b: Stage) -> Bool { a.order < b.order }
        private var order: Int { Self.allCases.firstIndex(of: self)! }
    }

    func run() async throws {
        LoggingSystem.bootstrap { label in
            var handler = StreamLogHandler.standardError(label: label)
            handler.logLevel = .error
            return handler
        }
        let logger = Logger(label: "bench")
        for binary in [relayBinary, emulatorBinary] + [baselineRelayBinary].compactMap({ $0 }) where !FileManager.default.isExecutableFile(atPath: binary) {
            throw BenchError("\(binary) is missing: build it first (swift build -c release)")
        }
        let workDirectory = FileManager.default.temporaryDirectory.appendingPathComponent("fleet-relay-bench-\(getpid())").path
        try FileManager.default.createDirectory(atPath: workDirectory, withIntermediateDirectories: true)
        say("fleet-relay bench: logs and scratch files in \(workDirectory)")
        let transports = transports.reduce(into: [Transport]()) { if !$0.contains($1) { $0.append($1) } }
        let profiler = try profile.map { try Profiler.start(directory: $0) }
        let environment = try await BenchEnvironment.start(relayBinary: relayBinary, emulatorBinary: emulatorBinary,
                                                          relayArguments: relayArguments, transports: transports,
                                                          workDirectory: workDirectory, logger: logger)
        let runs = transports.map { Scenarios(environment: environment, partitions: partitions, transport: $0,
                                              namesTransport: transports.count > 1, profiler: profiler) }
        var report = Report()
        let started = ContinuousClock.now
        do {
            say("backlog: producing \(drainVehicles * drainFixesPerVehicle) events for \(drainVehicles) vehicles on \(partitions) partitions")
            let backlog = try await runs[0].produceBacklog(topic: "bench-drain", vehicles: drainVehicles,
                                                           fixesPerVehicle: drainFixesPerVehicle)
            say("1. ceilings")
            let consume = try await runs[0].consumeCeiling(topic: backlog.topic, events: backlog.events, report: &report)
            var requestCeilings: [Double] = []
            for run in runs {
                requestCeilings.append(try await run.emulatorCeiling(requests: ceilingRequests, vehicles: 500, report: &report))
            }
            var drainCPU: [Transport: Double] = [:]
            var warmCPU: [Transport: Double] = [:]
            if until >= .drain, from <= .drain {
                drainCPU = try await drainRounds(runs, first: backlog, consumeCeiling: consume, requestCeilings: requestCeilings,
                                                 report: &report)
            }
            if until >= .warm, from <= .warm {
                warmCPU = try await warmRounds(runs, consumeCeiling: consume, requestCeilings: requestCeilings, report: &report)
            }
            let comparisons = [("backlog drain: relay CPU for the whole backlog", drainCPU),
                               ("warm steady state: relay CPU per request (one fix each)", warmCPU)]
            for (figure, cpu) in comparisons {
                if let https = cpu[.https], let plain = cpu[.plain] {
                    report.add("HTTPS overhead", "\(figure), HTTPS + HTTP/2 over plain HTTP/1.1", https / plain,
                               "×", ratio: https / plain / Self.httpsOverheadCeiling, of: "the \(Self.httpsOverheadCeiling)× ceiling")
                }
                if let https = cpu[.https], let grpc = cpu[.grpc] {
                    report.add("gRPC over REST", "\(figure), gRPC over REST (both HTTPS + HTTP/2)", grpc / https,
                               "×", ratio: grpc / https / Self.grpcOverheadCeiling, of: "the \(Self.grpcOverheadCeiling)× ceiling")
                }
            }
            if until >= .steady, from <= .steady {
                say("4. overload over \(runs[0].transport.title): \(steadyRate) events/s over \(steadyVehicles) vehicles, measured for \(steadySeconds) s after the cold start")
                let plan = Scenarios.SteadyPlan(section: "overload steady state", topic: "bench-steady", vehicles: steadyVehicles,
                                                rate: steadyRate, seconds: steadySeconds, warmupLimit: warmupLimit,
                                                reportsTokens: true)
                try await runs[0].steadyState(plan, consumeCeiling: consume, requestCeiling: requestCeilings[0], report: &report)
            }
            if until >= .formats, from <= .formats {
                say("5. input formats over \(runs[0].transport.title): the same \(formatVehicles * formatFixesPerVehicle) events as native events, native events through a mapping, Traccar records and Avro records")
                try await runs[0].inputFormats(vehicles: formatVehicles, fixesPerVehicle: formatFixesPerVehicle, report: &report)
            }
            if until >= .replay, from <= .replay {
                say("6. replay over \(runs[0].transport.title): \(replayVehicles * replayFixesPerVehicle) fixes of \(replayVehicles) vehicles, at two bounds on pending records")
                try await runs[0].replay(vehicles: replayVehicles, fixesPerVehicle: replayFixesPerVehicle,
                                         pendingBounds: [20_000, 400_000], report: &report)  // 400,000: the replay's default
            }
            if until >= .quota {
                for run in runs where run.transport.usesTLS {
                    say("7. quota over \(run.transport.title): \(quotaVehicles) vehicles' fixes drained against a quota of \(Int(quota)) requests/s: 1 ms and 50 ms answers, two relays in one group, the quota lifted halfway, a replay beside a live relay")
                    try await run.quota(vehicles: quotaVehicles, fixesPerVehicle: 2, quota: quota, report: &report)
                }
            }
        } catch {
            await environment.shutdown()
            throw error
        }
        await environment.shutdown()
        say("\n" + report.table())
        let wall = (ContinuousClock.now - started).seconds
        say(String(format: "\nbench took %.0f s; results in %@", wall, output))
        var context: [String: String] = [
            "date": ISO8601DateFormatter().string(from: Date()), "cores": String(ProcessInfo.processInfo.activeProcessorCount),
            "partitions": String(partitions), "relay_binary": relayBinary, "wall_seconds": String(Int(wall)),
            "transports": transports.map(\.rawValue).joined(separator: ","),
        ]
        if let baselineRelayBinary { context["baseline_relay_binary"] = baselineRelayBinary }
        let json = report.json(environment: context)
        try FileManager.default.createDirectory(atPath: (output as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(json.utf8).write(to: URL(fileURLWithPath: output))
    }
}

