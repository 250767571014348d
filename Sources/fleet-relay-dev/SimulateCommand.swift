import ArgumentParser
import CommandLineSupport
import FleetSimulator
import Foundation
import InputFormats
import Kafka
import Logging
import ServiceLifecycle

extension SimulatedRecordFormat: ExpressibleByArgument {}

/// What `simulate --format` writes: a JSON shape, or values framed for the Schema Registry.
enum SimulateFormat: String, ExpressibleByArgument, CaseIterable {
    case native, traccar, owntracks, geojson, debezium, avro, protobuf
}
import Synchronization

struct SimulateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "simulate",
        abstract: "Feed a Kafka topic with a simulated fleet's location events.")

    @OptionGroup var kafka: KafkaOptions

    @Option(help: "Topic to produce to.")
    var topic: String

    @Option(help: "Number of vehicles.")
    var vehicles = 200

    @Option(help: "Events per second over the whole fleet. Default: one per vehicle per second.")
    var rate: Double?

    @Option(help: "Seconds to run. Default: until interrupted.")
    var duration: Double?

    @Option(help: "Share of events (0–1) sent malformed, to exercise the dead-letter path.")
    var malformedShare = 0.0

    @Option(help: "Shape of the records: \(SimulateFormat.allCases.map(\.rawValue).joined(separator: ", ")). The relay's --input-format of the same name reads the JSON ones; avro and protobuf register their schema with --schema-registry (subject <topic>-value) and are read with the relay's --schema-registry.")
    var format: SimulateFormat = .native

    @Option(help: "Schema Registry URL, for --format avro or protobuf.")
    var schemaRegistry: String?

    @OptionGroup var logging: LoggingOptions

    func validate() throws {
        guard vehicles >= 1 else { throw ValidationError("--vehicles must be at least 1") }
        if let rate, rate <= 0 { throw ValidationError("--rate must be positive") }
        if let duration, duration <= 0 { throw ValidationError("--duration must be positive") }
        if (format == .avro || format == .protobuf) != (schemaRegistry != nil) {
            throw ValidationError("--schema-registry goes with --format avro or protobuf, and only with them")
        }
        guard (0...1).contains(malformedShare) else { throw ValidationError("--malformed-share must be from 0 to 1") }
    }

    /// The JSON shape, or the registry encoder after registering its schema.
    private func encoder() async throws -> any SimulatedRecordEncoder {
        guard let schemaRegistry else { return SimulatedRecordFormat(rawValue: format.rawValue)! }
        let client = SchemaRegistryClient(baseURL: schemaRegistry, credentials: nil, egress: .standard)
        do {
            if format == .avro {
                return AvroFixEncoder(schemaId: try await client.register(subject: topic + "-value", schema: AvroFixEncoder.schema, type: "AVRO"))
            }
            let descriptor = Data(ProtobufFixEncoder.fileDescriptor).base64EncodedString()
            return ProtobufFixEncoder(schemaId: try await client.register(subject: topic + "-value", schema: descriptor, type: "PROTOBUF"))
        } catch {
            throw StartupError("\(error)")
        }
    }

    func run() async throws {
        logging.bootstrap()
        let logger = Logger(label: "fleet-relay-simulate")
        let producer: KafkaProducer
        do {
            producer = try KafkaProducer(configuration: try kafka.configuration(), logger: logger)
        } catch let error as KafkaError {
            throw StartupError(error.message)
        }
        let feeder = FleetFeeder(topic: topic, vehicles: vehicles, rate: rate ?? Double(vehicles),
                                 malformedShare: malformedShare, encoder: try await encoder())
        logger.info("Feeding \(topic) with \(vehicles) vehicles at \(feeder.rate) events/s as \(format.rawValue) records")
        let feeding = FeedingService(feeder: feeder, producer: producer,
                                     duration: duration.map { .milliseconds(Int64($0 * 1000)) })
        let services = ServiceGroup(configuration: .init(
            services: [.init(service: feeding, successTerminationBehavior: .gracefullyShutdownGroup)],
            gracefulShutdownSignals: [.sigterm, .sigint], logger: logger))
        let delivered = try await producer.whileRunning {
            try await services.run()
            return await producer.flush(timeout: .seconds(30))
        }
        let produced = feeding.produced.load(ordering: .relaxed)
        logger.info("Produced \(produced) events; \(producer.failedDeliveries) failed\(delivered ? "" : "; some still undelivered at exit")")
        if producer.failedDeliveries > 0 || !delivered { throw ExitCode(1) }
    }
}

/// Runs a feeder until its duration ends or graceful shutdown begins.
final class FeedingService: Service, Sendable {
    let feeder: FleetFeeder
    let producer: KafkaProducer
    let duration: Duration?
    let produced = Atomic<Int>(0)

    init(feeder: FleetFeeder, producer: KafkaProducer, duration: Duration?) {
        self.feeder = feeder
        self.producer = producer
        self.duration = duration
    }

    func run() async throws {
        let count = try await cancelWhenGracefulShutdown {
            try await self.feeder.run(producer: self.producer, duration: self.duration)
        }
        produced.store(count, ordering: .relaxed)
    }
}
