import FleetModel
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
#if canImport(Glibc)
import Glibc
#endif
import FleetEngine
import JSON
import Kafka
import Synchronization
import Testing

/// The `fleet-relay` binary as an operator runs it: flags, environment, errors,
/// and SIGTERM, against a mock cluster and emulator living in this test process.
extension IntegrationTests {
@Suite struct CommandLineTests {
    static var binary: URL { builtExecutable("fleet-relay") }

    /// `fleet-relay-dev`: the demo, the emulator and the simulator.
    static var developmentBinary: URL { builtExecutable("fleet-relay-dev") }

    static let developmentCommands: Set = ["demo", "emulator", "simulate"]

    static func builtExecutable(_ name: String) -> URL {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent(name)
    }

    struct Finished {
        let status: Int32
        let stdout: String
        let stderr: String

        /// The end of the process's log, led by the start of its crash report when it crashed:
        /// the report lists every thread's frames, so a plain tail of the log loses the message
        /// and the crashing thread.
        func stderrExcerpt(_ limit: Int) -> String {
            guard let crash = stderr.range(of: "Fatal error") ?? stderr.range(of: "Program crashed") else {
                return String(stderr.suffix(limit))
            }
            return String(stderr[crash.lowerBound...].prefix(limit)) + "\n…\n" + String(stderr.suffix(limit / 2))
        }
    }

    final class RunningProcess: @unchecked Sendable {
        let process = Process()
        let stdout = Pipe()
        let stderr = Pipe()
        private let seenOutput = Mutex("")
        private let seenLog = Mutex("")
        private let exit: ProcessExit

        init(_ arguments: [String], environment: [String: String] = [:], binary: URL? = nil) throws {
            let tests = IntegrationTests.CommandLineTests.self
            process.executableURL = binary
                ?? (arguments.first.map(tests.developmentCommands.contains) == true ? tests.developmentBinary : tests.binary)
            process.arguments = arguments
            var env = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("FLEET_RELAY_") }
            env.merge(environment) { _, new in new }
            process.environment = env
            process.standardOutput = stdout
            process.standardError = stderr
            exit = ProcessExit(of: process)
            try process.run()
        }

        /// Collects standard output as it arrives, for `output`; `finish` then returns only what follows.
        func watchOutput() {
            stdout.fileHandleForReading.readabilityHandler = { [self] handle in
                let text = String(decoding: handle.availableData, as: UTF8.self)
                self.seenOutput.withLock { $0 += text }
            }
        }

        var output: String { seenOutput.withLock { $0 } }

        /// Collects standard error (the log) as it arrives, for `log`; `finish` then returns only what follows.
        func watchLog() {
            stderr.fileHandleForReading.readabilityHandler = { [self] handle in
                let text = String(decoding: handle.availableData, as: UTF8.self)
                self.seenLog.withLock { $0 += text }
            }
        }

        var log: String { seenLog.withLock { $0 } }

        /// Waits for exit and the output, reading on threads of its own: the emulator in
        /// this process needs the cooperative pool meanwhile. A process still running after
        /// `limit` is killed and fails the test.
        func finish(within limit: Duration = .seconds(300)) async -> Finished {
            async let out = Self.onOwnThread { String(decoding: self.stdout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
            async let err = Self.onOwnThread { String(decoding: self.stderr.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self) }
            let status = await process.exitStatus(exit, within: limit)
            return Finished(status: status, stdout: await out, stderr: await err)
        }

        private static func onOwnThread<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
            await withCheckedContinuation { continuation in
                Thread { continuation.resume(returning: work()) }.start()
            }
        }
    }

    func run(_ arguments: [String], environment: [String: String] = [:], binary: URL? = nil) async throws -> Finished {
        try await RunningProcess(arguments, environment: environment, binary: binary).finish()
    }

    /// Scrapes the ops endpoint of a relay that delivered 150 fixes and dead-lettered one record.
    func checkOpsEndpoint(port: Int, harness: RelayHarness, keyPath: String) async throws {
        let base = "http://127.0.0.1:\(port)"
        try await eventually("the metrics show every record finished") {
            let metrics = try await httpGet(base + "/metrics").body
            return metricValue(metrics, "fleet_relay_records_finished_total", ["outcome": "dead_lettered"]) == 1
                && metricSum(metrics, "fleet_relay_records_finished_total") == 151
        }
        let (status, metrics) = try await httpGet(base + "/metrics")
        #expect(status == 200)
        #expect(metricSum(metrics, "fleet_relay_records_consumed_total") == 151)
        #expect(metricValue(metrics, "fleet_relay_dead_letters_total", ["reason": "missing_field"]) == 1)
        #expect(metricValue(metrics, "fleet_relay_fleet_engine_requests_total", ["kind": "vehicle", "status": "200"])
            == Double(harness.emulator.statistics.updateResponsesByStatus[200] ?? -1))
        #expect(metricValue(metrics, "fleet_relay_build_info", [:]) == 1)
        #expect(metricValue(metrics, "fleet_relay_in_flight_requests", [:]) == 0)
        for name in ["fleet_relay_fleet_engine_request_seconds_bucket", "fleet_relay_end_to_end_seconds_count",
                     "fleet_relay_coalesced_per_request_count"] {
            #expect(metrics.contains(name), "\(name) is exposed")
        }
        // Nothing secret: neither key material nor any token.
        let keyMaterial = try #require(try JSONParser.parse(try String(contentsOfFile: keyPath, encoding: .utf8))["private_key"]?
            .stringValue?.split(separator: "\n").dropFirst(3).first.map(String.init))
        #expect(!metrics.contains("PRIVATE KEY") && !metrics.contains(keyMaterial) && !metrics.contains("eyJ"))
        let promtool = try #require(which("promtool"), "promtool (Debian's prometheus package, installed by make deps) checks the exposition")
        let check = try await runTool(promtool, ["check", "metrics"], input: metrics)
        #expect(check.status == 0, "promtool: \(check.output)")
        #expect(try await httpGet(base + "/healthz").status == 200)
        let ready = try await httpGet(base + "/readyz")
        #expect(ready.status == 200, "readyz: \(ready.body)")
        #expect(ready.body.contains("\"consumer_group\""))
        #expect(try await httpGet(base + "/nothing-here").status == 404)
    }

    /// A real Prometheus server scrapes the relay; its query API must agree with what
    /// the emulator received.
    func checkPrometheusScrapes(metricsPort: Int, harness: RelayHarness) async throws {
        let binary = try #require(which("prometheus"), "Debian's prometheus package (installed by make deps) provides the server")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("prometheus-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let config = directory.appendingPathComponent("prometheus.yml")
        try """
            global: {scrape_interval: 1s, evaluation_interval: 1s}
            scrape_configs:
              - job_name: fleet-relay
                static_configs: [{targets: ["127.0.0.1:\(metricsPort)"]}]
            """.write(to: config, atomically: true, encoding: .utf8)
        let port = try freeLoopbackPort()
        let server = Process()
        server.executableURL = URL(fileURLWithPath: binary)
        server.arguments = ["--config.file=\(config.path)", "--storage.tsdb.path=\(directory.appendingPathComponent("data").path)",
                            "--web.listen-address=127.0.0.1:\(port)", "--log.level=warn"]
        server.standardOutput = FileHandle.nullDevice
        server.standardError = FileHandle.nullDevice
        try server.run()
        defer { server.terminate() }

        func query(_ expression: String) async throws -> Double? {
            var components = URLComponents(string: "http://127.0.0.1:\(port)/api/v1/query")!
            components.queryItems = [URLQueryItem(name: "query", value: expression)]
            let (status, body) = try await httpGet(components.url!.absoluteString)
            guard status == 200, let value = try JSONParser.parse(body)["data"]?["result"]?.arrayValue?.first?["value"]?
                .arrayValue?.last?.stringValue else { return nil }
            return Double(value)
        }
        let accepted = Double(harness.emulator.statistics.updateResponsesByStatus[200] ?? -1)
        try await eventually("Prometheus scraped the relay's totals") {
            let finished = try? await query("sum(fleet_relay_records_finished_total)")
            let requests = try? await query("sum(fleet_relay_fleet_engine_requests_total{status=\"200\"})")
            return finished == 151 && requests == accepted
        }
        #expect(try await query("sum(fleet_relay_dead_letters_total{reason=\"missing_field\"})") == 1)
        #expect(try await query("up{job=\"fleet-relay\"}") == 1)
    }

    /// The production binary offers what production runs; the test doubles live in `fleet-relay-dev`.
    @Test func theProductionBinaryListsOnlyProductionCommands() async throws {
        let help = try await run(["--help"])
        #expect(help.status == 0)
        let commands = Self.subcommandNames(help.stdout)
        #expect(commands == ["run", "replay", "token", "mapping"], "\(help.stdout)")
        let emulator = try await run(["emulator", "--key-file", "k"], binary: Self.binary)
        #expect(emulator.status == 64, "no such command in fleet-relay: \(emulator.stderr)")

        let development = try await run(["--help"], binary: Self.developmentBinary)
        #expect(Self.subcommandNames(development.stdout) == ["demo", "emulator", "simulate"], "\(development.stdout)")
    }

    /// Every option of `run` has its variable, taken from ArgumentParser's model of the command
    /// (the JSON of `--experimental-dump-help`), however its help text reads.
    @Test func everyOptionOfRunHasItsEnvironmentVariable() async throws {
        let dump = try await run(["run", "--experimental-dump-help"])
        let info = try #require(try JSONSerialization.jsonObject(with: Data(dump.stdout.utf8)) as? [String: Any])
        let arguments = try #require((info["command"] as? [String: Any])?["arguments"] as? [[String: Any]])
        let longNames = arguments.flatMap { argument in
            ((argument["names"] as? [[String: Any]]) ?? []).compactMap { $0["kind"] as? String == "long" ? $0["name"] as? String : nil }
        }.filter { $0 != "help" && $0 != "version" }
        #expect(longNames.count > 40, "\(longNames)")
        var environment: [String: String] = [:]
        for name in longNames {
            environment["FLEET_RELAY_" + name.uppercased().replacingOccurrences(of: "-", with: "_")] = "x"
        }
        let result = try await run(["run"], environment: environment)
        #expect(!result.stderr.contains("ignoring FLEET_RELAY_"), "\(result.stderr)")
        #expect(result.status == 64, "the values are nonsense, so parsing fails after every variable was taken")
    }

    /// The command names of a help text's SUBCOMMANDS section.
    static func subcommandNames(_ help: String) -> [String] {
        guard let section = help.components(separatedBy: "SUBCOMMANDS:").last, help.contains("SUBCOMMANDS:") else { return [] }
        return section.split(separator: "\n").compactMap { line -> String? in
            guard line.hasPrefix("  "), !line.hasPrefix("   "), let word = line.split(separator: " ").first,
                  word.first?.isLowercase == true else { return nil }
            return String(word)
        }
    }

    @Test func unknownFlagFailsWithOneReadableLine() async throws {
        let result = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k", "--no-such-flag"])
        #expect(result.status == 64, "a usage error")
        let lines = result.stderr.split(separator: "\n")
        #expect(lines.count == 1)
        #expect(lines.first?.hasPrefix("fleet-relay: error: ") == true)
        #expect(result.stderr.contains("--no-such-flag"))
    }

    @Test func invalidValueFailsWithOneReadableLine() async throws {
        let result = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k", "--location-mode", "gps"])
        #expect(result.status == 64, "a usage error")
        #expect(result.stderr.split(separator: "\n").count == 1)
        #expect(result.stderr.contains("location-mode"))
    }

    @Test func aRevokeDrainShorterThanARequestIsAUsageError() async throws {
        let result = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k",
                                    "--request-timeout", "15", "--revoke-drain-timeout", "5s"])
        #expect(result.status == 64)
        #expect(result.stderr.contains("--revoke-drain-timeout must be longer than --request-timeout (15s)"))
        let longer = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "/nonexistent/sa.json",
                                    "--request-timeout", "15", "--revoke-drain-timeout", "16s"])
        #expect(longer.status == 78, "accepted, then stopped by the missing key file: \(longer.stderr)")
    }

    @Test func missingKeyFileStopsStartupNamingTheFile() async throws {
        let result = try await run(["run", "--brokers", "127.0.0.1:1", "--topic", "t", "--key-file", "/nonexistent/sa.json"])
        #expect(result.status == 78)
        #expect(result.stderr == "fleet-relay: error: key file /nonexistent/sa.json: no such file\n")
    }

    @Test func badKafkaPropertyIsReportedByLibrdkafkasOwnWords() async throws {
        let harness = try await RelayHarness(partitions: 1)
        let key = harness.writeKeyFile()
        let result = try await run(["run", "--brokers", "127.0.0.1:1", "--topic", "t", "--key-file", key,
                                    "--kafka-property", "no.such.property=1"])
        #expect(result.status == 78)
        #expect(result.stderr.hasPrefix("fleet-relay: error: Kafka property 'no.such.property': "))
        #expect(result.stderr.split(separator: "\n").count == 1)
        await harness.shutdown()
    }

    @Test func aBadCAFileOrProxyStopsStartupWithOneLineAndNoSecret() async throws {
        let caFile = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k", "--ca-file", "/nonexistent/ca.pem"])
        #expect(caFile.status == 78)
        #expect(caFile.stderr.hasPrefix("fleet-relay: error: --ca-file /nonexistent/ca.pem: cannot be read"), "\(caFile.stderr)")
        #expect(caFile.stderr.split(separator: "\n").count == 1)

        let proxy = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k"],
                                  environment: ["HTTPS_PROXY": "socks5://relay:sentinel-proxy-secret@proxy.corp:1080"])
        #expect(proxy.status == 78)
        #expect(proxy.stderr.contains("HTTPS_PROXY"), "\(proxy.stderr)")
        #expect(!proxy.stderr.contains("sentinel-proxy-secret"))
        #expect(proxy.stderr.split(separator: "\n").count == 1)

        let version = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k",
                                     "--fleet-engine-url", "http://127.0.0.1:8470", "--http-version", "2"])
        #expect(version.status == 64)
        #expect(version.stderr.contains("--http-version 2 needs an https --fleet-engine-url"), "\(version.stderr)")
    }

    /// gRPC runs on HTTP/2 only: a plain http URL or HTTP/1.1 is a usage error, from the flag or its variable.
    @Test func gRPCWithoutHTTP2StopsStartupWithOneLine() async throws {
        let plain = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k",
                                   "--fleet-engine-url", "http://127.0.0.1:8470"],
                                  environment: ["FLEET_RELAY_FLEET_ENGINE_PROTOCOL": "grpc"])
        #expect(plain.status == 64)
        #expect(plain.stderr.contains("--fleet-engine-protocol grpc needs an https --fleet-engine-url"), "\(plain.stderr)")
        let http1 = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k", "--fleet-engine-protocol", "grpc",
                                   "--http-version", "1.1"])
        #expect(http1.status == 64)
        #expect(http1.stderr.contains("--fleet-engine-protocol grpc cannot run with --http-version 1.1"), "\(http1.stderr)")
        let replay = try await run(["replay", "--brokers", "b", "--topic", "t", "--key-file", "k", "--from", "2026-11-01T00:00:00Z",
                                    "--fleet-engine-protocol", "grpc", "--http-version", "1.1"])
        #expect(replay.status == 64, "\(replay.stderr)")
        let unknown = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k", "--fleet-engine-protocol", "soap"])
        #expect(unknown.status == 64)
        #expect(unknown.stderr.contains("rest"), "names the values: \(unknown.stderr)")
    }

    @Test func plainHTTPIsRefusedForRemoteFleetEngine() async throws {
        let result = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k",
                                    "--fleet-engine-url", "http://fleet.example.com"])
        #expect(result.status == 64, "a usage error")
        #expect(result.stderr.contains("plain http"))
    }

    @Test func environmentVariablesSupplyFlagsAndTheCommandLineWins() async throws {
        let fromEnvironment = try await run(["run", "--brokers", "b", "--topic", "t"],
                                            environment: ["FLEET_RELAY_KEY_FILE": "/nonexistent/from-env.json"])
        #expect(fromEnvironment.stderr == "fleet-relay: error: key file /nonexistent/from-env.json: no such file\n")
        let flagWins = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "/nonexistent/flag.json"],
                                     environment: ["FLEET_RELAY_KEY_FILE": "/nonexistent/from-env.json"])
        #expect(flagWins.stderr == "fleet-relay: error: key file /nonexistent/flag.json: no such file\n")
        let invalid = try await run(["run", "--brokers", "b", "--topic", "t", "--key-file", "k"],
                                    environment: ["FLEET_RELAY_MAX_IN_FLIGHT": "lots"])
        #expect(invalid.status == 64, "a usage error")
        #expect(invalid.stderr.contains("max-in-flight"))
    }

    /// The demo's malformed share in another shape: each bad record reaches the dead-letter
    /// topic (not a mapping's skip rule); no Kafka client outlives the mock cluster, and the
    /// log holds no warning a newcomer would have to wonder about.
    @Test(arguments: ["traccar", "owntracks"])
    func demoInABuiltInFormatDeadLettersItsMalformedRecords(format: String) async throws {
        let demo = try RunningProcess(["demo", "--vehicles", "20", "--format", format, "--malformed-share", "0.3",
                                       "--duration", "6"])
        let result = await demo.finish()
        #expect(result.status == 0, "\(result.stderr.suffix(1500))")
        let summary = try #require(result.stdout.split(separator: "\n").last { $0.hasPrefix("stopped: ") })
        let deadLettered = summary.split(separator: ",").first { $0.contains("dead-lettered") }
            .flatMap { Int($0.split(separator: " ").last ?? "") } ?? 0
        #expect(deadLettered > 0, "\(summary)")
        #expect(!summary.contains("skipped"), "\(summary)")
        #expect(!result.stderr.contains("Connection refused"), "\(result.stderr.suffix(1500))")
        // New vehicles (404 on the live-location read) have no location to protect: no warning for them.
        #expect(!result.stderr.contains("refused to read the live location"), "\(result.stderr.suffix(1500))")
    }

    @Test func demoForwardsAndStopsCleanlyOnSIGINT() async throws {
        let demo = try RunningProcess(["demo", "--vehicles", "50"])
        demo.watchOutput()
        try await eventually("the demo forwards every vehicle's location") {
            demo.output.split(separator: "\n").contains { $0.contains("50 in Fleet Engine") }
        }
        demo.process.interrupt()  // SIGINT, as Ctrl-C
        do {
            try await eventually("the demo exits after SIGINT", timeout: .seconds(60)) { !demo.process.isRunning }
        } catch {
            kill(demo.process.processIdentifier, SIGKILL)
            throw error
        }
        #expect(demo.process.terminationStatus == 0)
        let summary = try #require(demo.output.split(separator: "\n").last { $0.hasPrefix("stopped: ") })
        #expect(summary.contains("50 vehicles in the emulator"))
        // The demo shows the production path: HTTPS, with HTTP/2 negotiated.
        #expect(demo.output.contains("(HTTPS, throwaway CA)"))
        #expect(summary.hasSuffix(" HTTP/2 and 0 HTTP/1.1 requests") && !summary.contains("over 0 HTTP/2"), "\(summary)")
    }

    /// Done-when of the spine: the binary, pointed at a broker and a token-checking
    /// server by flags alone, delivers good events, dead-letters bad ones and exits 0 on SIGTERM.
    @Test func runRelaysByFlagsAloneAndExitsZeroOnSIGTERM() async throws {
        let harness = try await RelayHarness(partitions: 2)
        let keyPath = harness.writeKeyFile()
        let metricsPort = try freeLoopbackPort()

        let generated = GeneratedEvents(vehicles: 30, fixesPerVehicle: 5)
        var records = generated.events.map(\.record)
        records.append((Array("veh-0".utf8), Array("{\"vehicle_id\": \"veh-0\", \"lat\": 95}".utf8)))
        try await harness.produce(records)

        let relay = try RunningProcess([
            "run", "--brokers", harness.cluster.bootstrapServers, "--topic", harness.topic, "--group", "cli",
            "--key-file", keyPath, "--fleet-engine-url", harness.emulatorURL, "--ca-file", harness.caFile,
            "--kafka-property", "session.timeout.ms=6000", "--log-level", "info", "--metrics-port", String(metricsPort),
        ], environment: ["FLEET_RELAY_COMMIT_INTERVAL_MS": "200"])
        try await eventually("every vehicle's newest fix reached the emulator") {
            generated.newest.allSatisfy { id, event in
                harness.emulator.vehicle(VehicleIdentity(kind: .vehicle, id: id))?.locationTimeMilliseconds == event.recordedAt
            }
        }
        let end = try await harness.endOffsets()
        try await eventually("offsets are committed to the end") {
            let committed = try await harness.committedOffsets(group: "cli")
            return (0..<Int32(2)).allSatisfy { committed[$0] == .some(end[$0]) }
        }
        try await checkOpsEndpoint(port: metricsPort, harness: harness, keyPath: keyPath)
        try await checkPrometheusScrapes(metricsPort: metricsPort, harness: harness)
        relay.process.terminate()  // SIGTERM
        let result = await relay.finish()
        #expect(result.status == 0, "stderr: \(result.stderr.suffix(2000))")
        #expect(result.stderr.contains("dead-lettered 1"))
        // Not a terminal: one JSON object per line, and nothing secret in any of them.
        for line in result.stderr.split(separator: "\n") {
            let entry = try #require(try? JSONParser.parse(String(line)), "not a JSON log line: \(line)")
            #expect(entry["level"]?.stringValue != nil && entry["message"]?.stringValue != nil, "log line: \(line)")
        }
        #expect(!result.stderr.contains("PRIVATE KEY") && !result.stderr.contains("eyJ"))
        let letters = try await harness.readDeadLetters(count: 1)
        #expect(letters.first?.header("fleet-relay-error") == "missing_field")
        await harness.shutdown()
    }
}
}

// MARK: Helpers for talking to the binary's ops endpoint

func freeLoopbackPort() throws -> Int {
    let socket = Glibc.socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(socket) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = 0
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(socket, $0, length) == 0 && getsockname(socket, $0, &length) == 0 }
    }
    guard bound else { throw FixtureError(message: "no free port") }
    return Int(UInt16(bigEndian: address.sin_port))
}

func httpGet(_ url: String) async throws -> (status: Int, body: String) {
    let (data, response) = try await URLSession.shared.data(from: URL(string: url)!)
    return ((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data, as: UTF8.self))
}

/// The value of one sample in Prometheus text, matching every given label.
func metricValue(_ text: String, _ name: String, _ labels: [String: String]) -> Double? {
    samples(text, name).first { sampleLabels, _ in labels.allSatisfy { sampleLabels[$0.key] == $0.value } }?.1
}

func metricSum(_ text: String, _ name: String) -> Double {
    samples(text, name).reduce(0) { $0 + $1.1 }
}

private func samples(_ text: String, _ name: String) -> [([String: String], Double)] {
    text.split(separator: "\n").compactMap { line in
        guard line.hasPrefix(name + "{") || line.hasPrefix(name + " ") else { return nil }
        let parts = line.split(separator: " ")
        guard let value = parts.last.flatMap({ Double($0) }) else { return nil }
        var labels: [String: String] = [:]
        if let open = line.firstIndex(of: "{"), let close = line.firstIndex(of: "}") {
            for pair in line[line.index(after: open)..<close].split(separator: ",") {
                let keyValue = pair.split(separator: "=", maxSplits: 1)
                if keyValue.count == 2 { labels[String(keyValue[0])] = keyValue[1].trimmingCharacters(in: ["\""]) }
            }
        }
        return (labels, value)
    }
}

func which(_ tool: String) -> String? {
    (ProcessInfo.processInfo.environment["PATH"] ?? "").split(separator: ":")
        .map { "\($0)/\(tool)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

func runTool(_ path: String, _ arguments: [String], input: String) async throws -> (status: Int32, output: String) {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: path)
    process.arguments = arguments
    let stdin = Pipe()
    let stdout = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = stdout
    try process.run()
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    return await withCheckedContinuation { continuation in
        Thread {
            let output = String(decoding: stdout.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
            process.waitUntilExit()
            continuation.resume(returning: (process.terminationStatus, output))
        }.start()
    }
}
