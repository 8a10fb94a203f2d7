package lakehouse;

import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Set;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.expressions.Attribute;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.classic.Dataset;

import scala.PartialFunction;
import scala.Tuple2;
import scala.collection.JavaConverters;
import scala.collection.immutable.Seq;
import scala.runtime.AbstractFunction1;

/**
 * A frame's analysed plan put over another input: what a parse built on one take's lines makes of the next take's,
 * without analysing the parse again step by step. A wide parse (a CDC image's decoding, hundreds of expressions in
 * each of many projections) is analysed by Spark once per DataFrame step it is built of, a quarter of a second
 * each; its analysed plan, once there, holds every expression resolved, and the next input's differs only in the
 * subtree it reads from. Here that subtree is replaced and the references above it renamed to the new input's
 * columns (Spark's own rewrite for a node with new output), and the plan is analysed once more as a whole.
 *
 * <p>Refused (an IllegalArgumentException: the caller replays the parse's steps on the new input) when the new
 * input's columns are not the old one's, in names and types, when the old input is not found in the plan, or when
 * a leaf of the old input is left in the plan after the replacement (a form of it this does not recognise).
 */
public final class PlanInput {
    private PlanInput() {
    }

    public static Dataset<Row> substitute(Dataset<?> built, Dataset<?> oldInput, Dataset<?> newInput) {
        LogicalPlan from = oldInput.logicalPlan();
        LogicalPlan to = newInput.logicalPlan();
        List<Attribute> fromColumns = JavaConverters.seqAsJavaList(from.output());
        List<Attribute> toColumns = JavaConverters.seqAsJavaList(to.output());
        if (fromColumns.size() != toColumns.size()) {
            throw new IllegalArgumentException("the new input has " + toColumns.size() + " columns, the old one "
                    + fromColumns.size());
        }
        for (int i = 0; i < fromColumns.size(); i++) {
            Attribute a = fromColumns.get(i);
            Attribute b = toColumns.get(i);
            if (!a.name().equals(b.name()) || !a.dataType().equals(b.dataType()) || a.nullable() != b.nullable()) {
                throw new IllegalArgumentException("column " + i + " of the new input is " + b.name() + " "
                        + b.dataType().simpleString() + (b.nullable() ? "" : " not null") + ", the old one's "
                        + a.name() + " " + a.dataType().simpleString() + (a.nullable() ? "" : " not null"));
            }
        }
        LogicalPlan canonical = from.canonicalized();
        int[] found = {0};
        LogicalPlan plan = built.logicalPlan().transformUpWithNewOutput(
                new PartialFunction<LogicalPlan, Tuple2<LogicalPlan, Seq<Tuple2<Attribute, Attribute>>>>() {
                    @Override
                    public boolean isDefinedAt(LogicalPlan node) {
                        // The input itself, or a copy of it with columns of other ids: the analyser gives a
                        // frame read twice in one plan (a union of two filters of it) a renamed copy.
                        return node == from || node.getClass() == from.getClass()
                                && node.output().size() == fromColumns.size()
                                && node.canonicalized().equals(canonical);
                    }

                    @Override
                    public Tuple2<LogicalPlan, Seq<Tuple2<Attribute, Attribute>>> apply(LogicalPlan node) {
                        found[0]++;
                        List<Attribute> columns = JavaConverters.seqAsJavaList(node.output());
                        List<Tuple2<Attribute, Attribute>> renamed = new ArrayList<>();
                        for (int i = 0; i < columns.size(); i++) {
                            renamed.add(new Tuple2<>(columns.get(i), toColumns.get(i)));
                        }
                        return new Tuple2<>(to, JavaConverters.asScalaBuffer(renamed).toList());
                    }
                },
                never(), always());
        if (found[0] == 0) {
            throw new IllegalArgumentException("the old input is not in the frame's plan");
        }
        // Whatever the analyser made of the old input that is not recognised above would still read the old input:
        // none of its leaves may be left, but those of the new input put there.
        Set<LogicalPlan> oldLeaves = new HashSet<>();
        for (LogicalPlan leaf : JavaConverters.seqAsJavaList(from.collectLeaves())) {
            oldLeaves.add(leaf.canonicalized());
        }
        Set<LogicalPlan> newLeaves = Collections.newSetFromMap(new IdentityHashMap<>());
        newLeaves.addAll(JavaConverters.seqAsJavaList(to.collectLeaves()));
        for (LogicalPlan leaf : JavaConverters.seqAsJavaList(plan.collectLeaves())) {
            if (!newLeaves.contains(leaf) && oldLeaves.contains(leaf.canonicalized())) {
                throw new IllegalArgumentException("the frame's plan reads the old input where it is not recognised: "
                        + leaf.simpleString(100));
            }
        }
        return Dataset.ofRows(built.sparkSession(), plan);
    }

    private static AbstractFunction1<LogicalPlan, Object> never() {
        return new AbstractFunction1<>() {
            @Override
            public Object apply(LogicalPlan node) {
                return Boolean.FALSE;
            }
        };
    }

    private static AbstractFunction1<LogicalPlan, Object> always() {
        return new AbstractFunction1<>() {
            @Override
            public Object apply(LogicalPlan node) {
                return Boolean.TRUE;
            }
        };
    }
}
