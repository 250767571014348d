import ArgumentParser
import AsyncHTTPClient
import Egress
import FleetAuth
import FleetEngine
import FleetSimulator
import Foundation
import Kafka
import KafkaTesting
import Logging

/// How the relay reaches the emulator in a scenario: the production path, or plain
/// HTTP/1.1 on loopback for comparison.
enum Transport: String, CaseIterable, ExpressibleByArgument {
    /// REST over HTTPS, HTTP/2 negotiated.
    case https
    /// gRPC over HTTPS and HTTP/2.
    case grpc
    /// REST over plain HTTP/1.1.
    case plain

    var title: String {
        switch self {
        case .https: "REST over HTTPS + HTTP/2"
        case .grpc: "gRPC over HTTPS + HTTP/2"
        case .plain: "REST over plain HTTP/1.1"
        }
    }

    var usesTLS: Bool { self != .plain }

    var wireProtocol: FleetEngineProtocol { self == .grpc ? .grpc : .rest }

    /// The relay's flags for it, besides the URL and the CA file (none for REST, so that builds
    /// older than the flag can be benchmarked too).
    var relayArguments: [String] { self == .grpc ? ["--fleet-engine-protocol", "grpc"] : [] }
}

/// One emulator process serving one transport, and probes that reach it.
struct EmulatorEndpoint {
    let transport: Transport
    let process: ChildProcess
    let url: String
    /// The throwaway CA of its certificate, when it serves HTTPS.
    let caFile: String?
    let probes: Probes
}

/// What every scenario shares: the mock cluster (in this process), the emulators
/// (a process per transport), a key, and how to start the relay as its own process.
struct BenchEnvironment {
    private(set) var relayBinary: String
    let relayArguments: [String]
    let workDirectory: String
    let cluster: KafkaMockCluster
    let kafka: KafkaConfiguration
    let keyFile: String
    let key: ServiceAccountKey
    let emulators: [EmulatorEndpoint]
    let egress: Egress
    let http: HTTPClient
    let logger: Logger

    static func start(relayBinary: String, emulatorBinary: String, relayArguments: [String], transports: [Transport],
                      workDirectory: String, logger: Logger) async throws -> BenchEnvironment {
        let cluster = try KafkaMockCluster(brokers: 1, logger: logger)
        let kafka = KafkaConfiguration(bootstrapServers: cluster.bootstrapServers)
        let keyFile = workDirectory + "/bench-sa.json"
        guard let json = ServiceAccountKey.generateKeyFileJSON(
            projectId: "bench-project", clientEmail: "relay@bench-project.iam.gserviceaccount.com", privateKeyId: "bench-kid"),
            FileManager.default.createFile(atPath: keyFile, contents: Data(json.utf8), attributes: [.posixPermissions: 0o600])
        else { throw BenchError("cannot write a key file in \(workDirectory)") }
        let key = try ServiceAccountKey.parse(Array(json.utf8), source: keyFile)
        var processes: [(Transport, ChildProcess, String, String?)] = []
        for transport in transports {
            let port = 18_000 + Int.random(in: 0..<2000)
            // A throwaway CA per emulator: each writes its own.
            let tlsDirectory = workDirectory + "/tls-" + transport.rawValue
            let tlsArguments = transport.usesTLS ? ["--generate-tls", tlsDirectory] : []
            let process = try ChildProcess(
                name: "emulator-\(transport.rawValue)", executable: emulatorBinary,
                arguments: ["emulator", "--key-file", keyFile, "--port", String(port), "--record-history", "--log-level", "warning"]
                    + tlsArguments,
                logPath: workDirectory + "/emulator-\(transport.rawValue).log")
            processes.append((transport, process, "\(transport.usesTLS ? "https" : "http")://127.0.0.1:\(port)",
                              transport.usesTLS ? tlsDirectory + "/ca.pem" : nil))
            if transport.usesTLS {
                _ = await waitUntil(timeout: .seconds(30)) { FileManager.default.fileExists(atPath: tlsDirectory + "/server-key.pem") }
            }
        }
        let egress = try Egress.load(caFiles: processes.compactMap(\.3))
        let http = HTTPClient(eventLoopGroup: HTTPClient.defaultEventLoopGroup, configuration: egress.clientConfiguration(for: "https://127.0.0.1"))
        var emulators: [EmulatorEndpoint] = []
        for (transport, process, url, caFile) in processes {
            let probes = Probes(emulatorURL: url, kafka: kafka, http: http, logger: logger)
            guard await waitUntil(timeout: .seconds(30), { await probes.get(url + "/_emulator/statistics") != nil }) else {
                throw BenchError("the \(transport.title) emulator did not start (see \(workDirectory)/emulator-\(transport.rawValue).log)")
            }
            emulators.append(EmulatorEndpoint(transport: transport, process: process, url: url, caFile: caFile, probes: probes))
        }
        return BenchEnvironment(relayBinary: relayBinary, relayArguments: relayArguments, workDirectory: workDirectory,
                                cluster: cluster, kafka: kafka, keyFile: keyFile, key: key, emulators: emulators,
                                egress: egress, http: http, logger: logger)
    }

    /// The same environment, starting another relay binary.
    func running(relayBinary: String) -> BenchEnvironment {
        var environment = self
        environment.relayBinary = relayBinary
        return environment
    }

    func emulator(_ transport: Transport) -> EmulatorEndpoint {
        emulators.first { $0.transport == transport }!
    }

    /// The relay's flags for reaching `transport`'s emulator, besides its URL: the CA file, the protocol.
    func transportArguments(_ transport: Transport) -> [String] {
        (emulator(transport).caFile.map { ["--ca-file", $0] } ?? []) + transport.relayArguments
    }

    /// Starts `fleet-relay run` on `topic` and waits until its consumer joined the group.
    func startRelay(topic: String, group: String, transport: Transport, extraArguments: [String] = [], logName: String? = nil) async throws
        -> (relay: ChildProcess, metricsPort: Int, startup: Duration) {
        let metricsPort = 20_000 + Int.random(in: 0..<5000)
        let started = ContinuousClock.now
        let endpoint = emulator(transport)
        let transportArguments = transportArguments(transport)
        let relay = try ChildProcess(name: "relay", executable: relayBinary, arguments: [
            "run", "--brokers", cluster.bootstrapServers, "--topic", topic, "--group", group, "--key-file", keyFile,
            "--fleet-engine-url", endpoint.url, "--metrics-port", String(metricsPort), "--metrics-host", "127.0.0.1",
            "--log-level", "warning",
        ] + transportArguments + extraArguments + relayArguments, logPath: "\(workDirectory)/relay-\(logName ?? group).log")
        guard await waitUntil(timeout: .seconds(60), { await endpoint.probes.isReady(metricsPort: metricsPort) }) else {
            _ = await relay.stop()
            throw BenchError("the relay did not become ready (see \(workDirectory)/relay-\(group).log)")
        }
        return (relay, metricsPort, .now - started)
    }

    /// lz4-compressed batches: the mock cluster keeps about 5 MiB per partition, and
    /// compressed events stretch that over a longer stretch of the stream.
    var producerConfiguration: KafkaConfiguration {
        var configuration = kafka
        configuration["compression.type"] = "lz4"
        configuration["linger.ms"] = "20"
        return configuration
    }

    func createTopic(_ topic: String, partitions: Int) throws {
        try cluster.createTopic(topic, partitions: partitions)
        try cluster.createTopic(topic + ".dlq", partitions: 1)
    }

    func shutdown() async {
        for emulator in emulators {
            emulator.probes.closeKafkaClients()
            _ = await emulator.process.stop()
        }
        try? await http.shutdown()
    }
}

struct BenchError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

extension Duration {
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
