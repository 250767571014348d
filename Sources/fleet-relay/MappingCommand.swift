import ArgumentParser
import CommandLineSupport
import FleetEngine
import FleetModel
import Foundation
import InputFormats
import JSON
import Kafka
import Logging
import Relay

struct MappingCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "mapping",
        abstract: "Show the built-in input formats and check a mapping against sample records.",
        subcommands: [Show.self, Check.self])

    struct Show: ParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Print a built-in format as a mapping file, a starting point for one's own.")

        @Argument(help: "One of \(BuiltInFormat.allCases.map(\.rawValue).joined(separator: ", ")).")
        var format: BuiltInFormat

        func run() {
            print(format.mappingText, terminator: "")
        }
    }

    struct Check: AsyncParsableCommand {
        static let configuration = CommandConfiguration(
            abstract: "Decode sample records as the relay would and print each one's update request, skip rule or rejection.",
            discussion: """
                Records come from --file (one record value per line, as it appears in the topic) or
                from Kafka (--brokers, --topic, --count: the first records of every partition).
                Exits 1 when a record was rejected, so a mapping can be checked in CI.
                """)

        @OptionGroup var input: InputOptions
        @OptionGroup var egressOptions: EgressOptions

        @Option(help: "A file with one record value per line.")
        var file: String?

        @Option(help: "Kafka bootstrap servers to read sample records from (with --topic).")
        var brokers: String?

        @Option(help: "Topic to read sample records from.")
        var topic: String?

        @Option(help: "How many records to read from Kafka.")
        var count = 10

        @Option(help: "Kind for events without one: vehicle or delivery_vehicle.")
        var kind: VehicleKind = .vehicle

        @Option(help: "Provider (project) id shown in the request paths.")
        var provider = "PROVIDER"

        @Option(help: "Which VehicleLocation fields carry the fix: supplemental or device.")
        var locationMode: LocationMode = .supplemental

        func validate() throws {
            guard (file != nil) != (brokers != nil || topic != nil) else {
                throw ValidationError("give --file, or --brokers with --topic")
            }
            if file == nil, brokers == nil || topic == nil { throw ValidationError("--brokers and --topic go together") }
            guard count >= 1 else { throw ValidationError("--count must be at least 1") }
        }

        func run() async throws {
            let decoder = RecordDecoders.forTopic(mapping: try input.mapping(), schemaSource: try input.schemaSource(egress: try egressOptions.egress()),
                                                       defaultKind: kind)
            let records = try await samples()
            do {
                try await decoder.prepare(records, maximumAttempts: 3) { CommandLineMain.printError("fleet-relay: \($0); retrying") }
            } catch let error as SchemaRegistryUnavailable {
                throw StartupError("\(error)")
            }
            var (sent, skipped, rejected) = (0, 0, 0)
            for (number, record) in records.enumerated() {
                let outcome = decoder.decode(record)
                switch outcome {
                case .update: sent += 1
                case .skipped: skipped += 1
                case .rejected: rejected += 1
                }
                print("record \(number + 1): \(describe(outcome))")
            }
            print("\(records.count) records: \(sent) sent, \(skipped) skipped, \(rejected) rejected")
            if rejected > 0 { throw ExitCode(1) }
        }

        private func describe(_ outcome: DecodeOutcome) -> String {
            switch outcome {
            case .update(let update):
                let request = FleetEngineRequest(update: VehicleLocationUpdate(vehicle: update.vehicle, lastLocation: update.fix),
                                                 provider: provider, mode: locationMode)
                return "\(request.method) \(request.pathAndQuery) \(request.body)"
            case .skipped(let rule):
                return "skipped: \(rule)"
            case .rejected(let rejection):
                return "rejected (\(rejection.reason.rawValue)): \(rejection.detail)"
            }
        }

        private func samples() async throws -> [InputRecord] {
            if let file {
                guard let text = try? String(contentsOfFile: file, encoding: .utf8) else {
                    throw StartupError("--file \(file): cannot read it as UTF-8 text")
                }
                return text.split(separator: "\n", omittingEmptySubsequences: true)
                    .map { InputRecord(key: nil, value: Array($0.utf8)) }
            }
            return try await fromKafka(brokers: brokers!, topic: topic!)
        }

        /// The first `count` records, reading every partition from its start.
        private func fromKafka(brokers: String, topic: String) async throws -> [InputRecord] {
            let logger = Logger(label: "fleet-relay.mapping")
            let reader = try KafkaPartitionReader(configuration: KafkaConfiguration(["bootstrap.servers": brokers]), logger: logger)
            let partitions = try await reader.partitionIDs(topic: topic)
            var starts: [TopicPartitionOffset] = []
            var available = 0
            for partition in partitions {
                let place = TopicPartition(topic: topic, partition: partition)
                let (low, high) = try await reader.watermarks(place)
                if high > low {
                    starts.append(TopicPartitionOffset(place, offset: low))
                    available += Int(high - low)
                }
            }
            guard !starts.isEmpty else { return [] }
            try await reader.assign(starts)
            var records: [InputRecord] = []
            let wanted = min(count, available)
            let deadline = ContinuousClock.now + .seconds(30)
            while records.count < wanted, ContinuousClock.now < deadline {
                let (batch, _) = try await reader.poll(maximum: wanted - records.count)
                records += batch.map(InputRecord.init)
            }
            return records
        }
    }
}
