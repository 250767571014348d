// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "fleet-relay",
    platforms: [.macOS(.v15)],
    products: [
        // What production runs: `run`, `replay`, `token`, `mapping`.
        .executable(name: "fleet-relay", targets: ["fleet-relay"]),
        // The emulator, the simulator and the demo: never in the image.
        .executable(name: "fleet-relay-dev", targets: ["fleet-relay-dev"]),
        .executable(name: "fleet-relay-bench", targets: ["Bench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/async-http-client.git", from: "1.37.0"),
        // Both already come with async-http-client: HTTPS and HTTP/2 for the emulator's server.
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-nio-http2.git", from: "1.46.0"),
        // Already comes with async-http-client: the CONNECT handshake for the HTTP/2 transport.
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.26.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-async-algorithms.git", from: "1.1.4"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus.git", from: "2.4.1"),
        // Input mapping files (YAML, and JSON as YAML).
        .package(url: "https://github.com/jpsim/Yams.git", from: "6.2.2"),
    ],
    targets: [
        // librdkafka, from the system (librdkafka-dev).
        .systemLibrary(
            name: "CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),
        // librdkafka's mock cluster API, for KafkaTesting only.
        .systemLibrary(name: "CRdKafkaMock", path: "Sources/Kafka/RDKafka/MockCluster/CRdKafkaMock", pkgConfig: "rdkafka",
                       providers: [.apt(["librdkafka-dev"])]),
        // glibc's mallopt, to tune the allocator.
        .systemLibrary(name: "CMalloc"),
        // RS256 through the system's libcrypto (libssl-dev): no second BoringSSL build.
        .target(
            name: "CRSAShim",
            linkerSettings: [.linkedLibrary("crypto")]
        ),
        // A throwaway certificate authority for the emulator's HTTPS (tests and the demo).
        .target(
            name: "CThrowawayCA",
            linkerSettings: [.linkedLibrary("crypto")]
        ),
        // A strict JSON parser and writer, for events, tokens and requests.
        .target(name: "JSON"),
        // The domain's nouns: vehicle identity and kind, location fix, location update.
        .target(name: "FleetModel"),
        // The consumer group member, the partition reader (explicit assignment, for replays), the producer
        // and the offset inspector; every librdkafka call is behind `RDKafkaClient` in `Kafka/RDKafka/`.
        .target(
            name: "Kafka",
            dependencies: [
                "CRdKafka", "JSON", .product(name: "Logging", package: "swift-log"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            exclude: ["RDKafka/MockCluster"]
        ),
        // librdkafka's in-process mock cluster, for tests, the bench and the demo.
        .target(
            name: "KafkaTesting",
            dependencies: ["CRdKafkaMock", "Kafka", .product(name: "Logging", package: "swift-log")],
            // Beside the other librdkafka calls, in a target of its own: never in the production binary.
            path: "Sources/Kafka/RDKafka/MockCluster",
            exclude: ["CRdKafkaMock"]
        ),
        // Service-account keys, vehicle JWTs, the signer protocol, the local signer, checks of issued tokens,
        // the token cache.
        .target(
            name: "FleetAuth",
            dependencies: [
                "FleetModel", "CRSAShim", "JSON", .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // How HTTPS clients leave the process: trust anchors, proxy, HTTP version, and the
        // HTTP/2 transport to Fleet Engine.
        .target(
            name: "Egress",
            dependencies: [
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOTLS", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOHPACK", package: "swift-nio-http2"),
                .product(name: "NIOExtras", package: "swift-nio-extras"),
                .product(name: "Metrics", package: "swift-metrics"),
            ]
        ),
        // Request bodies for both kinds of vehicle and both location modes, the REST client, answers
        // classified into outcomes, failure causes and refusals.
        .target(
            name: "FleetEngine",
            dependencies: [
                "FleetModel", "JSON", "FleetAuth", "Egress",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Signers that mint through a service: the operator's token service, IAM signJwt; Application Default
        // Credentials (key-file grant, metadata server).
        .target(
            name: "RemoteSigners",
            dependencies: ["FleetModel", "FleetAuth", "JSON", "Egress", .product(name: "AsyncHTTPClient", package: "async-http-client")]
        ),
        // A small HTTP/1.1 server on SwiftNIO (the ops endpoint's; HTTP/2 and TLS for the emulator).
        .target(
            name: "HTTPServing",
            dependencies: [
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
                .product(name: "NIOSSL", package: "swift-nio-ssl"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
            ]
        ),
        // The Fleet Engine emulator and stand-ins for the signers' peers and the Schema Registry: a library,
        // so that tests start them in-process.
        .target(
            name: "FleetEngineEmulator",
            dependencies: [
                "FleetModel", "CRSAShim", "CThrowawayCA", "JSON", "FleetAuth", "FleetEngine", "HTTPServing", "InputFormats",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP2", package: "swift-nio-http2"),
                .product(name: "NIOTLS", package: "swift-nio"),
            ]
        ),
        // Record decoders: the native event, mappings (files and built-in formats), Schema Registry framing
        // with Avro, Protobuf and JSON Schema.
        .target(
            name: "InputFormats",
            dependencies: [
                "FleetModel", "JSON", "FleetAuth", "FleetEngine", "Egress", .product(name: "Yams", package: "Yams"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOHTTP1", package: "swift-nio"),
            ]
        ),
        // The pipeline: its state machine (`PipelineState` routing events to `PartitionLedger`,
        // `VehicleScheduler`, `LetterQueue` and `Pacing`), its driver (request workers, letter writers, the
        // timer) and its run (feed, decoding, shutdown) for the relay and replays; the forwarder, the
        // dead-letter writer, health and metrics, the relay service.
        .target(
            name: "Relay",
            dependencies: [
                "FleetModel", "JSON", "Kafka", "FleetAuth", "FleetEngine", "InputFormats",
                .product(name: "DequeModule", package: "swift-collections"),
                .product(name: "HeapModule", package: "swift-collections"),
                .product(name: "OrderedCollections", package: "swift-collections"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // `fleet-relay replay`: window resolution, the window reader as the pipeline run's record feed, the
        // checkpoint as its commit sink, progress, the summary.
        .target(
            name: "Replay",
            dependencies: [
                "FleetModel", "Relay", "Kafka", "FleetAuth", "FleetEngine", "InputFormats",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "AsyncAlgorithms", package: "swift-async-algorithms"),
            ]
        ),
        // `/metrics`, `/healthz`, `/readyz`.
        .target(
            name: "OpsServer",
            dependencies: [
                "HTTPServing", "JSON",
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // A simulated fleet and its feeder, for the demo and the bench.
        .target(
            name: "FleetSimulator",
            dependencies: ["Kafka", "FleetAuth", "FleetEngine", "JSON"]
        ),
        // What both executables share: flags from the environment, exit codes, logging.
        .target(
            name: "CommandLineSupport",
            dependencies: [
                "CMalloc", "Kafka", "Egress", "FleetEngine", "JSON",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // The command line: `run`, `replay`, `token`, `mapping`.
        .executableTarget(
            name: "fleet-relay",
            dependencies: [
                "FleetModel", "CommandLineSupport", "Relay", "Replay", "Kafka", "FleetAuth", "RemoteSigners", "FleetEngine",
                "OpsServer", "JSON", "Egress", "HTTPServing", "InputFormats",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // The demo, the emulator and the simulator as commands; never in the image.
        .executableTarget(
            name: "fleet-relay-dev",
            dependencies: [
                "CommandLineSupport", "Relay", "Kafka", "KafkaTesting", "FleetAuth", "FleetEngine", "FleetEngineEmulator",
                "FleetSimulator", "JSON", "Egress", "HTTPServing", "InputFormats",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
        // `make bench`: drives a release build of fleet-relay as separate processes.
        .executableTarget(
            name: "Bench",
            dependencies: [
                "FleetModel", "Kafka", "KafkaTesting", "FleetAuth", "FleetEngine", "FleetSimulator", "JSON", "Egress", "InputFormats",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "JSONTests", dependencies: ["JSON"]),
        .testTarget(
            name: "OpsServerTests",
            dependencies: ["OpsServer", "HTTPServing", "JSON", .product(name: "Prometheus", package: "swift-prometheus")]
        ),
        .testTarget(
            name: "FleetAuthTests",
            dependencies: ["FleetModel", "FleetAuth", "JSON", .product(name: "MetricsTestKit", package: "swift-metrics")]
        ),
        .testTarget(
            name: "RemoteSignersTests",
            dependencies: ["FleetModel", "RemoteSigners", "FleetAuth", "FleetEngineEmulator", "HTTPServing", "JSON", "Egress"]
        ),
        .testTarget(
            name: "FleetEngineTests",
            dependencies: [
                "FleetModel", "FleetEngine", "FleetAuth", "FleetEngineEmulator", "JSON", "Egress", "HTTPServing",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
            ]
        ),
        .testTarget(
            name: "RelayTests",
            dependencies: [
                "FleetModel", "Relay", "Replay", "Kafka", "KafkaTesting", "FleetAuth", "RemoteSigners", "FleetEngine", "FleetEngineEmulator", "FleetSimulator",
                "JSON", "OpsServer", "Egress", "HTTPServing", "InputFormats",
                .product(name: "NIOCore", package: "swift-nio"),
                .product(name: "NIOPosix", package: "swift-nio"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "MetricsTestKit", package: "swift-metrics"),
            ],
            // The Python peer is run from its path in the source tree, not bundled.
            exclude: ["Python"],
            resources: [.copy("Fixtures")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
