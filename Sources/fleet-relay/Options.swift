import ArgumentParser
import CommandLineSupport
import Egress
import FleetModel
import Foundation
import FleetEngine
import Kafka
import Logging
import NIOCore
import Relay
import RemoteSigners

extension VehicleKind: ExpressibleByArgument {}
extension LocationMode: ExpressibleByArgument {}
extension FleetEngineProtocol: ExpressibleByArgument {}

struct FleetEngineOptions: ParsableArguments {
    @Option(help: "Fleet Engine provider (Google Cloud project id). Default: the key file's or the credentials' project.")
    var provider: String?

    @Option(help: "Fleet Engine base URL. Plain http is accepted only for loopback hosts.")
    var fleetEngineURL = "https://fleetengine.googleapis.com"

    @Option(help: "Protocol to Fleet Engine: rest (JSON; HTTP/2, or HTTP/1.1 where the server offers no HTTP/2) or grpc (gRPC's unary calls, as Google's client libraries make them; needs HTTP/2 over https).")
    var fleetEngineProtocol: FleetEngineProtocol = .rest

    @Option(help: "Which location fields carry the fix: supplemental or device.")
    var locationMode: LocationMode = .supplemental

    @Option(help: "Requests to Fleet Engine in flight at once.")
    var maxInFlight = 64

    @Option(help: "Fleet Engine request timeout in seconds.")
    var requestTimeout = 15

    @Option(help: "HTTP version to Fleet Engine: auto (HTTP/2 where TLS negotiates it), 1.1, or 2 (required; needs https).")
    var httpVersion: Egress.HTTPVersion = .automatic

    @Option(help: "HTTP/2 streams one connection carries at most. The server's announced SETTINGS_MAX_CONCURRENT_STREAMS (Fleet Engine: 100) decides below this; the relay opens connections from the streams allowed, at least one per core and at most --max-in-flight.")
    var streamsPerConnection = 100

    @Option(help: "Send an HTTP/2 PING after this long without a frame from Fleet Engine.")
    var http2PingAfter = DurationArgument(argument: "5s")!

    @Option(help: "Close an HTTP/2 connection as dead when its PING is not answered within this long; its requests fail at once and are retried on a new one.")
    var http2PingTimeout = DurationArgument(argument: "5s")!

    @Option(help: "Close an HTTP/2 connection that carried no request for this long.")
    var http2IdleTimeout = DurationArgument(argument: "60s")!

    func validate() throws {
        guard maxInFlight >= 1, maxInFlight <= 4096 else { throw ValidationError("--max-in-flight must be from 1 to 4096") }
        guard requestTimeout >= 1 else { throw ValidationError("--request-timeout must be at least 1 second") }
        guard streamsPerConnection >= 1 else { throw ValidationError("--streams-per-connection must be at least 1") }
        for (flag, value) in [("--http2-ping-after", http2PingAfter), ("--http2-ping-timeout", http2PingTimeout),
                              ("--http2-idle-timeout", http2IdleTimeout)] where value.duration < .milliseconds(100) {
            throw ValidationError("\(flag) must be at least 100ms")
        }
        if let problem = URLText.insecurityReason(fleetEngineURL) {
            throw ValidationError("--fleet-engine-url \(problem)")
        }
        if httpVersion == .http2, !fleetEngineURL.lowercased().hasPrefix("https://") {
            throw ValidationError("--http-version 2 needs an https --fleet-engine-url (HTTP/2 is negotiated in the TLS handshake)")
        }
        if fleetEngineProtocol == .grpc {
            guard fleetEngineURL.lowercased().hasPrefix("https://") else {
                throw ValidationError("--fleet-engine-protocol grpc needs an https --fleet-engine-url (gRPC runs on HTTP/2, negotiated in the TLS handshake)")
            }
            guard httpVersion != .http1 else {
                throw ValidationError("--fleet-engine-protocol grpc cannot run with --http-version 1.1: gRPC needs HTTP/2")
            }
        }
    }

    /// - Parameter defaultProvider: the signer's project, used when `--provider` is not given.
    func clientConfiguration(defaultProvider: String?, egress: Egress) throws -> FleetEngineClient.Configuration {
        guard let provider = provider ?? defaultProvider else {
            throw StartupError("--provider is required: the signer does not tell which Google Cloud project is the Fleet Engine provider")
        }
        var egress = egress
        egress.httpVersion = httpVersion
        return FleetEngineClient.Configuration(
            baseURL: fleetEngineURL, provider: provider, locationMode: locationMode, wireProtocol: fleetEngineProtocol,
            requestTimeout: .seconds(requestTimeout), maximumInFlight: maxInFlight,
            streamsPerConnection: streamsPerConnection,
            liveness: HTTP2Liveness(pingAfterSilence: TimeAmount(http2PingAfter.duration), pingTimeout: TimeAmount(http2PingTimeout.duration),
                                    idleTimeout: TimeAmount(http2IdleTimeout.duration)),
            egress: egress)
    }

}

/// How HTTPS leaves the process, for Fleet Engine and the signers' services alike.
struct EgressOptions: ParsableArguments {
    @Option(name: .customLong("ca-file"),
            help: ArgumentHelp("PEM file of extra CA certificates to trust besides the system's, e.g. a private token service's or the emulator's (repeatable). Verification is always on. HTTPS_PROXY and NO_PROXY are honoured.",
                               valueName: "file"))
    var caFiles: [String] = []

    /// Loads the CA files and reads the proxy from the environment; problems stop startup.
    func egress(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Egress {
        do {
            return try Egress.load(caFiles: caFiles, proxy: EgressProxy.from(environment: environment))
        } catch {
            throw StartupError("\(error)")
        }
    }

    /// What startup logs: CA files and the proxy's address, never its credentials.
    static func logMetadata(_ egress: Egress) -> Logger.Metadata {
        [
            "ca_files": "\(egress.caFiles.isEmpty ? "none" : egress.caFiles.joined(separator: ","))",
            "https_proxy": "\(egress.proxy.server?.address ?? "none")",
        ]
    }
}

struct PipelineOptions: ParsableArguments {
    @Option(help: "Kind for events without a \"kind\" field: vehicle or delivery_vehicle.")
    var kind: VehicleKind = .vehicle

    @Option(help: "Dead-letter topic. Default: <topic>.dlq.")
    var deadLetterTopic: String?

    // Accepted so that existing deployments still start; requests no longer wait for batches.
    @Option(help: .hidden) var batchSize: Int?
    @Option(help: .hidden) var batchLingerMs: Int?

    @Option(help: "Consumed but unfinished records above which fetching pauses.")
    var maxPendingRecords = 50_000

    @Option(help: "Older fixes sent with a vehicle's newest one, at most (pastLocations).")
    var maxPastLocations = 100

    @Option(help: "Milliseconds between offset commits; a backlog worked off is committed at once.")
    var commitIntervalMs = 1000

    @Option(help: "Time to finish in-flight work on shutdown before abandoning it (uncommitted): 500ms, 20s, 1m.")
    var shutdownTimeout = DurationArgument(argument: "20s")!

    @Option(help: "Time a revoke waits for the revoked partitions' requests under way before committing; longer than --request-timeout. Default: --request-timeout plus 5s.")
    var revokeDrainTimeout: DurationArgument?

    @Option(help: "Give up on a failing request after this long and dead-letter it. Default: retry while the process runs.")
    var retryDeadline: DurationArgument?

    @Option(help: "Start a vehicle's next update this long after its last one ended; sooner fixes wait and are coalesced (Fleet Engine suggests 5s).")
    var minIntervalPerVehicle = DurationArgument(argument: "0s")!

    @Option(help: "Forget a vehicle with nothing to send for this long, so memory follows active vehicles; its next fix re-reads its live location first.")
    var vehicleIdleTimeout = DurationArgument(argument: "5m")!

    @Option(help: "Fleet Engine requests per second at most, live-location reads and updates alike: a hard ceiling, e.g. this relay's share of a known project quota. Default: none; beneath it the relay paces at the rate Fleet Engine admits, learnt from its 429s.")
    var maxRequestsPerSecond: Double?

    @Option(help: "First retry delay in milliseconds (exponential backoff with full jitter).")
    var retryInitialMs = 200

    @Option(help: "Longest retry delay in milliseconds.")
    var retryMaxMs = 10_000

    func validate() throws {
        guard maxPendingRecords >= 1 else { throw ValidationError("--max-pending-records must be at least 1") }
        guard maxPastLocations >= 0 else { throw ValidationError("--max-past-locations must not be negative") }
        if let maxRequestsPerSecond, !(maxRequestsPerSecond > 0 && maxRequestsPerSecond.isFinite) {
            throw ValidationError("--max-requests-per-second must be a positive number")
        }
        guard commitIntervalMs >= 10 else { throw ValidationError("--commit-interval-ms must be at least 10") }
        guard retryInitialMs >= 1, retryMaxMs >= retryInitialMs else {
            throw ValidationError("--retry-initial-ms must be at least 1 and at most --retry-max-ms")
        }
    }

    /// Flags that are still accepted but no longer do anything, for a warning at startup.
    var ignoredFlags: [String] {
        (batchSize == nil ? [] : ["--batch-size"]) + (batchLingerMs == nil ? [] : ["--batch-linger-ms"])
    }

    /// A revoke that gave up before a request's timeout could let that request land after
    /// the next owner's newer fix.
    func validate(requestTimeoutSeconds: Int) throws {
        if let revokeDrainTimeout, revokeDrainTimeout.duration <= .seconds(requestTimeoutSeconds) {
            throw ValidationError("--revoke-drain-timeout must be longer than --request-timeout (\(requestTimeoutSeconds)s)")
        }
    }

    func relayConfiguration(kafka: KafkaConfiguration, topic: String, group: String, maxInFlight: Int,
                            requestTimeoutSeconds: Int) -> RelayConfiguration {
        RelayConfiguration(
            kafka: kafka, topic: topic, group: group, deadLetterTopic: deadLetterTopic, defaultKind: kind,
            maximumInFlight: maxInFlight,
            maximumPendingRecords: maxPendingRecords, pastLocationsLimit: maxPastLocations,
            commitInterval: .milliseconds(commitIntervalMs), shutdownTimeout: shutdownTimeout.duration,
            retryPolicy: RetryPolicy(initialDelay: .milliseconds(retryInitialMs), maximumDelay: .milliseconds(retryMaxMs)),
            retryDeadline: retryDeadline?.duration,
            revokeDrainTimeout: revokeDrainTimeout?.duration ?? .seconds(requestTimeoutSeconds + 5),
            minimumIntervalPerVehicle: minIntervalPerVehicle.duration, vehicleIdleTimeout: vehicleIdleTimeout.duration,
            maximumRequestsPerSecond: maxRequestsPerSecond)
    }
}
