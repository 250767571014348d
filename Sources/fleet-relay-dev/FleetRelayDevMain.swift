import ArgumentParser
import CommandLineSupport

/// The test doubles and the demo, kept out of the production binary: a Fleet Engine emulator
/// with stand-ins for the signers' peers and the Schema Registry, a simulated fleet, and the
/// demo that runs them with the relay and librdkafka's mock cluster in one process.
struct FleetRelayDev: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "fleet-relay-dev",
        abstract: "Fleet Engine emulator, simulated fleet and the local demo, for trying and testing fleet-relay.",
        discussion: "Every flag can also be set with FLEET_RELAY_<FLAG_IN_UPPER_SNAKE>; the command line wins.",
        subcommands: [DemoCommand.self, EmulatorCommand.self, SimulateCommand.self]
    )
}

@main
enum FleetRelayDevMain {
    static func main() async {
        await CommandLineMain.run(FleetRelayDev.self)
    }
}
