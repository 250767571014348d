import NIOCore
import NIOPosix

/// Runs a task's jobs on one event loop. A task that prefers it starts its requests on
/// that loop's connections without a hop and is resumed there when the answer arrives,
/// instead of crossing to the global pool and back for every request.
public final class EventLoopTaskExecutor: TaskExecutor, Sendable {
    public let eventLoop: any EventLoop

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let job = UnownedJob(job)
        eventLoop.execute { job.runSynchronously(on: self.asUnownedTaskExecutor()) }
    }

    /// One executor per event loop of `group`.
    static func each(of group: any EventLoopGroup) -> [EventLoopTaskExecutor] {
        group.makeIterator().map(EventLoopTaskExecutor.init)
    }

    /// The event loops of the group the pools use.
    public static let singletonLoops = each(of: MultiThreadedEventLoopGroup.singleton)
}
